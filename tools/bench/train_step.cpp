// One train step of an MLP (784-1024-1024-10, cross entropy, Adam) in nnx against the same step
// written by hand with torch::nn::Linear and torch::optim::Adam, in one process, same threads.
// Under mpirun -np N, nnx trains data parallel (global batch split over N) and rank 0 prints the
// samples/s of all ranks together; the LibTorch step runs on one process only (-np 1).
// Usage: bench_train_step [steps=100] [layout=dp|fsdp] [only=nnx|libtorch]; fsdp splits every
// kernel's rows over the data axis as well (each rank keeps 1/N of the parameters and of Adam's
// moments); `only` runs one of the two steps (for a profiler).
// The two steps alternate, so that both see the same machine. Prints JSON lines: medians of the
// whole step and of its two halves, and the ratios nnx / LibTorch.
#include <nnx/nnx.h>

#include <torch/torch.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace {

struct Mlp : nnx::Module {
  Mlp(int64_t width, nnx::Rngs& rngs, bool fsdp)
      : hidden1(784, width, rngs, options(fsdp)), hidden2(width, width, rngs, options(fsdp)),
        head(width, 10, rngs, options(fsdp)) {}
  static nnx::LinearOptions options(bool fsdp) {
    if (!fsdp) return {};
    return {.kernel_metadata = {.out_sharding = nnx::P("data", nnx::none)}};
  }
  nnx::Array operator()(const nnx::Array& x) {
    return head(nnx::relu(hidden2(nnx::relu(hidden1(x)))));
  }
  nnx::Linear NNX_FIELD(hidden1);
  nnx::Linear NNX_FIELD(hidden2);
  nnx::Linear NNX_FIELD(head);
};

struct TorchMlp : torch::nn::Module {
  explicit TorchMlp(int64_t width)
      : hidden1(register_module("hidden1", torch::nn::Linear(784, width))),
        hidden2(register_module("hidden2", torch::nn::Linear(width, width))),
        head(register_module("head", torch::nn::Linear(width, 10))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return head(torch::relu(hidden2(torch::relu(hidden1(x)))));
  }
  torch::nn::Linear hidden1, hidden2, head;
};

// The nnx step: value_and_grad, then Optimizer::update.
struct NnxRun {
  std::shared_ptr<const nnx::Mesh> mesh = nnx::make_mesh({nnx::world_size()}, {"data"});
  nnx::MeshContext on{mesh};
  nnx::Rngs rngs{0};
  Mlp model;
  nnx::optim::Optimizer opt;
  nnx::Array x, y;
  nnx::State grads;
  NnxRun(int64_t batch, int64_t width, bool fsdp)
      : model(width, rngs, fsdp), opt(model, nnx::optim::adam(1e-4)),
        x(nnx::device_put(torch::randn({batch, 784}), {mesh, nnx::P("data")})),
        y(nnx::device_put(torch::randint(10, {batch}), {mesh, nnx::P("data")})) {
    grad();
  }
  void grad() {
    // Last step's gradients go first, as in a loop whose gradients are local to its body (and as
    // LibTorch's zero_grad releases them below), so that their memory serves this step's.
    grads = nnx::State{};
    grads = nnx::value_and_grad([&](Mlp& m) { return nnx::cross_entropy(m(x), y); }, model).grads;
  }
  void update() { opt.update(model, grads); }
};

// The same step written by hand with torch::nn and torch::optim.
struct TorchRun {
  std::shared_ptr<TorchMlp> model;
  torch::optim::Adam opt;
  torch::Tensor x, y;
  TorchRun(int64_t batch, int64_t width)
      : model(std::make_shared<TorchMlp>(width)),
        opt(model->parameters(), torch::optim::AdamOptions(1e-4)), x(torch::randn({batch, 784})),
        y(torch::randint(10, {batch})) {
    grad();
  }
  void grad() {
    opt.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(x), y).backward();
  }
  void update() { opt.step(); }
};

using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

struct Timings {
  std::vector<double> step, grad, update;
  // One step, timed as a whole and by halves.
  template <class Run> void time(Run& run) {
    auto t0 = Clock::now();
    run.grad();
    auto t1 = Clock::now();
    run.update();
    auto t2 = Clock::now();
    grad.push_back(seconds(t0, t1));
    update.push_back(seconds(t1, t2));
    step.push_back(seconds(t0, t2));
  }
};

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::stoi(argv[1]) : 100;
  const std::string layout = argc > 2 ? argv[2] : "dp";
  const std::string only = argc > 3 ? argv[3] : "";
  NNX_CHECK(layout == "dp" || layout == "fsdp", "layout is dp or fsdp, got '{}'", layout);
  NNX_CHECK(only.empty() || only == "nnx" || only == "libtorch",
            "only is nnx or libtorch, got '{}'", only);
  const int64_t batch = 256, width = 1024;
  const int ranks = nnx::world_size();
  const bool with_nnx = only != "libtorch";
  const bool with_torch = ranks == 1 && only != "nnx";
  NnxRun nnx_run(batch, width, layout == "fsdp");
  std::optional<TorchRun> torch_run;
  if (with_torch) torch_run.emplace(batch, width);
  // Interleaved, so that both see the same machine; 5 warm-up steps each.
  Timings n, t;
  for (int i = -5; i < reps; ++i) {
    if (with_nnx) n.time(nnx_run);
    if (with_torch) t.time(*torch_run);
    if (i < 0) n = t = Timings{};
  }
  if (nnx::world_rank() != 0) return 0;
  const auto line = [&](const char* system, const Timings& r) {
    const double step = median(r.step);
    fmt::print("{{\"bench\": \"train_step\", \"system\": \"{}\", \"layout\": \"{}\", \"ranks\": {}, \"threads\": {}, "
               "\"global_batch\": {}, \"steps\": {}, \"step_ms\": {:.2f}, \"value_and_grad_ms\": {:.2f}, "
               "\"update_ms\": {:.2f}, \"samples_per_s\": {:.0f}}}\n",
               system, layout, ranks, at::get_num_threads(), batch, reps, step * 1e3,
               median(r.grad) * 1e3, median(r.update) * 1e3, batch / step);
  };
  if (with_nnx) line("nnx", n);
  if (!with_torch) return 0;
  line("libtorch", t);
  if (!with_nnx) return 0;
  fmt::print("{{\"bench\": \"train_step\", \"ratio\": \"nnx/libtorch\", \"step\": {:.3f}, "
             "\"value_and_grad\": {:.3f}, \"update\": {:.3f}}}\n",
             median(n.step) / median(t.step), median(n.grad) / median(t.grad),
             median(n.update) / median(t.update));
  return 0;
}
