// Fashion-MNIST, end to end: an MLP classifier trained data-parallel over every rank (optionally
// with its hidden layers split Megatron-style over a "model" axis), each rank reading only its
// rows of each batch, with a progress bar, test accuracy per epoch, a checkpoint per epoch, exact
// resume, and a PNG of the curves. `tools/demo.sh` runs it; `--help` lists the flags.
#include <nnx/nnx.h>

#include "common/checkpoints.h"
#include "common/csv_log.h"
#include "common/flags.h"
#include "common/progress_bar.h"

#include <torch/torch.h>

#include <filesystem>
#include <fstream>

namespace ckpt = nnx::checkpoint;
namespace fs = std::filesystem;
using nnx::P;

struct Classifier : nnx::Module {
  // Hidden layers split column-then-row over "model" (a no-op on a mesh whose model axis is 1).
  Classifier(int64_t hidden, double dropout_rate, nnx::Rngs& rngs)
      : hidden1(784, hidden, rngs, {.kernel_metadata = {.out_sharding = P(nnx::none, "model")},
                                    .bias_metadata = {.out_sharding = P("model")}}),
        hidden2(hidden, hidden, rngs, {.kernel_metadata = {.out_sharding = P("model", nnx::none)}}),
        head(hidden, 10, rngs),
        dropout(dropout_rate, rngs) {}

  nnx::Array operator()(const nnx::Array& images) {
    nnx::Array h = dropout(nnx::relu(hidden1(images)));
    h = dropout(nnx::relu(hidden2(h)));
    return head(h);
  }

  nnx::Linear NNX_FIELD(hidden1);
  nnx::Linear NNX_FIELD(hidden2);
  nnx::Linear NNX_FIELD(head);
  nnx::Dropout NNX_FIELD(dropout);
};

namespace {

examples::Flags make_flags() {
  return examples::Flags(
      "Trains an MLP on Fashion-MNIST over every rank (mpirun -np N; the batch is split over N).\n"
      "usage: fashion_mnist [flags]",
      {{"data-dir", "/usr/share/datasets/fashion-mnist", "the IDX files (Debian's dataset-fashion-mnist)"},
       {"out", "runs/fashion_mnist", "run directory: checkpoints/, losses.csv, epochs.csv, curves.png"},
       {"epochs", "8", "training epochs"},
       {"batch", "128", "global batch (a multiple of the data-parallel ranks)"},
       {"hidden", "512", "hidden layer width"},
       {"lr", "0.002", "peak learning rate (AdamW, warmup then cosine decay)"},
       {"dropout", "0.1", "dropout rate"},
       {"seed", "0", "parameter, dropout and shuffling seed"},
       {"model-parallel", "1", "ranks that split each hidden layer (the rest split the batch)"},
       {"train-records", "60000", "train on the first N records only"},
       {"resume", "false", "continue from the latest checkpoint in --out", true},
       {"stop-after-step", "0", "save a checkpoint and stop after this step (0: never)"}});
}

// Images as float [N, 784] scaled to zero mean, unit variance; labels as int64.
void prepare(std::map<std::string, at::Tensor>& rows) {
  rows["image"] = (rows["image"].reshape({rows["image"].size(0), 784}).to(torch::kFloat) / 255.0 -
                   0.2860) / 0.3530;
  rows["label"] = rows["label"].to(torch::kLong);
}

// Writes the loss and accuracy curves as a PNG through gnuplot (from Debian's gnuplot-nox).
void plot(const fs::path& out) {
  std::ofstream script(out / "curves.gp");
  script << "set terminal png size 1100,420\n"
         << "set output '" << (out / "curves.png").string() << "'\n"
         << "set datafile separator ','\nset key autotitle columnhead\nset grid\n"
         << "set multiplot layout 1,2\n"
         << "set title 'training loss (cross entropy)'\nset xlabel 'step'\nset yrange [0:1.5]\n"
         << "plot '" << (out / "losses.csv").string() << "' using 1:3 with lines title 'loss'\n"
         << "set title 'accuracy'\nset xlabel 'epoch'\nset yrange [0.7:1]\n"
         << "plot '" << (out / "epochs.csv").string()
         << "' using 1:4 with linespoints title 'test', '' using 1:3 with linespoints title 'train'\n"
         << "unset multiplot\n";
  script.close();
  const std::string command = "gnuplot '" + (out / "curves.gp").string() + "' 2>&1";
  if (std::system(command.c_str()) == 0)
    fmt::print("plot: {}\n", (out / "curves.png").string());
  else
    fmt::print("plot: gnuplot failed or is missing (apt-get install gnuplot-nox); data in {}\n",
               out.string());
}

}  // namespace

int main(int argc, char** argv) {
  const bool lead = nnx::world_rank() == 0;  // prints and writes the logs
  examples::Flags flags = make_flags();
  flags.parse(argc, argv, lead);
  const int64_t epochs = flags.integer("epochs", 1), batch = flags.integer("batch", 1);
  const int64_t model_ways = flags.integer("model-parallel", 1);
  const int64_t stop_after = flags.integer("stop-after-step", 0);
  const fs::path out = flags.str("out");
  if (nnx::world_size() % model_ways != 0)
    flags.fail(lead, fmt::format("--model-parallel {} does not divide the {} ranks", model_ways,
                                 nnx::world_size()));

  auto mesh = nnx::make_mesh({nnx::world_size() / model_ways, model_ways}, {"data", "model"});
  const std::string dir = flags.str("data-dir") + "/";
  std::shared_ptr<const nnx::data::Source> train_images =
      std::make_shared<nnx::data::IdxFile>(dir + "train-images-idx3-ubyte.gz");
  std::shared_ptr<const nnx::data::Source> train_labels =
      std::make_shared<nnx::data::IdxFile>(dir + "train-labels-idx1-ubyte.gz");
  const int64_t records = flags.integer("train-records", 1);
  if (records < train_images->size()) {
    train_images = nnx::data::slice(train_images, 0, records);
    train_labels = nnx::data::slice(train_labels, 0, records);
  }
  nnx::data::DataLoader train({{"image", train_images}, {"label", train_labels}},
                              {.global_batch = batch, .sharding = {{mesh, P("data")}},
                               .seed = static_cast<uint64_t>(flags.integer("seed")),
                               .map = prepare});
  // About 1000 test records per batch, split evenly over the data ranks; the last batch's padded
  // rows are masked out of both metrics.
  const int64_t data_ranks = mesh->axis_size("data");
  const int64_t test_batch = (1000 + data_ranks - 1) / data_ranks * data_ranks;
  nnx::data::DataLoader test(
      {{"image", std::make_shared<nnx::data::IdxFile>(dir + "t10k-images-idx3-ubyte.gz")},
       {"label", std::make_shared<nnx::data::IdxFile>(dir + "t10k-labels-idx1-ubyte.gz")}},
      {.global_batch = test_batch, .sharding = {{mesh, P("data")}}, .shuffle = false,
       .remainder = nnx::data::Remainder::pad, .map = prepare});

  // Each rank computes only its blocks of the parameters.
  nnx::MeshContext on(mesh);
  nnx::Rngs rngs(flags.integer("seed"), {{"dropout", flags.integer("seed") + 1}});
  Classifier model(flags.integer("hidden", 1), flags.number("dropout"), rngs);
  const int64_t total_steps = epochs * train.steps_per_epoch();
  nnx::optim::Optimizer opt(
      model, nnx::optim::adamw(nnx::optim::warmup_cosine_decay_schedule(
                 0.0, flags.positive("lr"), std::min<int64_t>(200, total_steps / 10),
                 total_steps)));

  if (!flags.on("resume")) examples::start_fresh(out / "checkpoints", lead);
  ckpt::CheckpointManager manager((out / "checkpoints").string(),
                                  {.max_to_keep = 2, .async = true});
  nnx::metrics::MultiMetric train_metrics({{"loss", nnx::metrics::Average("loss")},
                                           {"accuracy", nnx::metrics::Accuracy()}});
  auto everything = [&] {  // what an exact resume needs
    return ckpt::combine({{"model", nnx::state(model)}, {"opt", opt.state()},
                          {"data", train.state()}, {"metrics", train_metrics.state()}});
  };
  if (flags.on("resume")) {
    const int64_t step = examples::latest_step_or_fail(manager, "--resume",
                                                         (out / "checkpoints").string());
    auto restored = manager.restore(step, everything());
    nnx::update(model, ckpt::part(restored, "model"));
    opt.load_state(ckpt::part(restored, "opt"));
    train.load_state(ckpt::part(restored, "data"));
    train_metrics.load_state(ckpt::part(restored, "metrics"));
    if (lead) {
      examples::truncate_log(out / "losses.csv", step);
      examples::truncate_log(out / "epochs.csv", train.epoch());  // epochs done
      fmt::print("resumed from step {} (epoch {}, batch {})\n", step, train.epoch(),
                 train.position());
    }
  } else if (lead) {
    fs::create_directories(out);
    std::ofstream(out / "losses.csv") << "step,epoch,loss\n";
    std::ofstream(out / "epochs.csv") << "epoch,train_loss,train_accuracy,test_accuracy,test_loss\n";
  }
  if (lead)
    fmt::print("Fashion-MNIST: {} train records, batch {} over {}, {} parameters, {} steps\n",
               train.num_records(), batch, mesh->to_string(),
               nnx::state(model, nnx::OfType<nnx::Param>).numel(), total_steps);
  std::fflush(stdout);

  std::ofstream losses;
  if (lead) losses.open(out / "losses.csv", std::ios::app);
  while (train.epoch() < epochs) {
    const int64_t epoch = train.epoch();
    model.train();
    if (train.position() == 0) train_metrics.reset();  // else resumed mid-epoch
    examples::ProgressBar bar(fmt::format("epoch {}/{}", epoch + 1, epochs),
                              train.steps_per_epoch(), batch, lead, train.position());
    while (auto b = train.next()) {
      const nnx::Array& images = (*b)["image"];
      const nnx::Array& labels = (*b)["label"];
      auto [loss, logits, grads] = nnx::value_and_grad(
          [&](Classifier& m) {
            nnx::Array logits = m(images);
            return std::pair(nnx::cross_entropy(logits, labels), logits);
          },
          model);
      opt.update(model, grads);
      train_metrics.update({{"loss", loss}, {"logits", logits}, {"labels", labels}});
      const float loss_value = nnx::gather(loss).item<float>();  // the whole mean, every rank
      if (lead) losses << fmt::format("{},{},{:.9g}\n", opt.step(), epoch, loss_value);
      bar.update(train.position(), loss_value);
      // A stop at an epoch's last step goes through the epoch's end (evaluation, then the
      // checkpoint an uninterrupted run makes there), so a resume saves no step twice.
      if (opt.step() == stop_after && train.position() < train.steps_per_epoch()) {
        manager.save(opt.step(), everything());
        manager.wait_until_finished();
        if (lead) fmt::print("\nstopped after step {}; continue with --resume\n", opt.step());
        return 0;
      }
    }
    model.eval();
    nnx::metrics::Accuracy test_accuracy;
    nnx::metrics::Average test_loss("loss");
    while (auto t = test.next()) {
      nnx::Array logits = model((*t)["image"]);
      test_accuracy.update({{"logits", logits}, {"labels", (*t)["label"]}, {"mask", t->mask}});
      test_loss.update(
          {{"loss", nnx::softmax_cross_entropy_with_integer_labels(logits, (*t)["label"])},
           {"mask", t->mask}});
    }
    auto tr = train_metrics.compute();
    if (lead) {
      losses.flush();
      std::ofstream(out / "epochs.csv", std::ios::app)
          << fmt::format("{},{:.6f},{:.6f},{:.6f},{:.6f}\n", epoch + 1, tr["loss"],
                         tr["accuracy"], test_accuracy.compute(), test_loss.compute());
      fmt::print("epoch {}: train loss {:.4f}, train accuracy {:.2f}%, test accuracy {:.2f}%\n",
                 epoch + 1, tr["loss"], 100 * tr["accuracy"], 100 * test_accuracy.compute());
    }
    // Model, optimizer and loader: an exact resume point (once per step: a run resumed from
    // an epoch's last step, saved before that stop went through the epoch's end, has it).
    if (manager.latest_step() != opt.step()) manager.save(opt.step(), everything());
    if (opt.step() == stop_after) {
      manager.wait_until_finished();
      if (lead) fmt::print("stopped after step {}; continue with --resume\n", opt.step());
      return 0;
    }
  }
  manager.wait_until_finished();
  if (lead) {
    fmt::print("checkpoints: {}\n", (out / "checkpoints").string());
    plot(out);
  }
  return 0;
}
