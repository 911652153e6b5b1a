// Checkpoints across meshes: train a sharded model on Mesh(data, model), save it with its
// optimizer through a CheckpointManager (asynchronously), then restore it onto a mesh of another
// shape from an abstract model, as Orbax's flow: eval_shape, shardings from the rules, restore.
// Run: mpirun -np 8 --oversubscribe build/examples/checkpoint_reshard [dir=/tmp/nnx_example_ckpt]
// (a new or empty folder, or one this example made: it deletes the folder's contents).
#include <nnx/nnx.h>

#include <torch/torch.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <string>

using nnx::P;
namespace ckpt = nnx::checkpoint;

struct Net : nnx::Module {
  explicit Net(nnx::Rngs& rngs)
      : up(16, 64, rngs, {.kernel_metadata = {.out_sharding = P("embed", "mlp")}}),
        down(64, 4, rngs, {.kernel_metadata = {.out_sharding = P("mlp", "embed")}}) {}
  nnx::Array operator()(const nnx::Array& x) { return down(nnx::relu(up(x))); }
  nnx::Linear NNX_FIELD(up);
  nnx::Linear NNX_FIELD(down);
};

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  const bool lead = nnx::world_rank() == 0;
  if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {  // one argument, a folder
    const std::string given = argc == 2 ? argv[1] : "";
    const bool help = given == "--help" || given == "-h";
    if (lead)
      fmt::print(help ? stdout : stderr, "usage: checkpoint_reshard [FOLDER] (default "
                                         "/tmp/nnx_example_ckpt; its contents are replaced)\n");
    return help ? 0 : 2;
  }
  const fs::path dir = argc > 1 ? argv[1] : "/tmp/nnx_example_ckpt";
  const int64_t ranks = nnx::world_size(), ways = ranks % 2 == 0 ? 2 : 1;
  // The run starts afresh, but deletes only a folder this example made (it leaves a mark there)
  // or an empty one: a folder given by mistake keeps its files.
  const fs::path mark = dir / ".made-by-checkpoint_reshard";
  std::error_code ec;
  // Every rank decides alike (a rank looking while rank 0 deletes could see the mark gone).
  const bool mine = !fs::exists(dir) || fs::is_empty(dir, ec) || fs::exists(mark);
  auto ours = torch::tensor({mine ? 1 : 0});
  nnx::Communicator::world().all_reduce_(ours, nnx::ReduceOp::min);
  if (ours.item<int64_t>() == 0) {
    if (lead)
      fmt::print(stderr, "checkpoint_reshard: '{}' holds files this example did not make; give "
                         "it a new or empty folder (it deletes the folder's contents)\n",
                 dir.string());
    return 1;
  }
  if (nnx::world_rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(mark) << "checkpoint_reshard deletes this folder when it runs again\n";
  }
  nnx::Communicator::world().barrier();
  nnx::LogicalAxisRules rules({{"batch", "data"}, {"mlp", "model"}, {"embed", nnx::none}});

  torch::manual_seed(0);
  const auto inputs = torch::randn({8 * ranks, 16}), targets = torch::randn({8 * ranks, 4});
  auto loss_on = [&](Net& model, const std::shared_ptr<const nnx::Mesh>& mesh) {
    auto x = nnx::device_put(inputs, {mesh, P("data")});
    auto y = nnx::device_put(targets, {mesh, P("data")});
    return nnx::mean_squared_error(model(x), y);
  };

  {  // Train a few steps on Mesh(data: ranks/2, model: 2), saving as we go.
    auto mesh = nnx::make_mesh({ranks / ways, ways}, {"data", "model"});
    nnx::MeshContext on(mesh);
    nnx::Rngs rngs(0);
    Net model(rngs);
    nnx::optim::Optimizer opt(model, nnx::optim::adam(1e-2));
    ckpt::CheckpointManager manager(dir, {.max_to_keep = 2, .async = true});
    for (int64_t step = 1; step <= 5; ++step) {
      auto [loss, grads] = nnx::value_and_grad([&](Net& m) { return loss_on(m, mesh); }, model);
      opt.update(model, grads);
      // Copies to host memory and returns; the files are written in the background.
      manager.save(step, ckpt::combine({{"model", nnx::state(model)}, {"opt", opt.state()}}));
    }
    manager.wait_until_finished();
    const double loss = nnx::gather(loss_on(model, mesh)).item<double>();
    if (nnx::world_rank() == 0)
      fmt::print("trained on {}: loss {:.6f}, checkpoints {}\n", mesh->to_string(), loss,
                 fmt::join(manager.all_steps(), ", "));
  }

  // Restore onto Mesh(data: 2, model: ranks/2): each rank reads only its new blocks.
  auto mesh = nnx::make_mesh({ways, ranks / ways}, {"data", "model"});
  ckpt::CheckpointManager manager(dir);
  nnx::Rngs rngs(0);
  Net model = nnx::eval_shape([&] { return Net(rngs); });  // shapes only, no storage
  auto restored = manager.restore(ckpt::latest, ckpt::combine({{"model", nnx::state(model)}}),
                                  {.mesh = mesh});
  nnx::update(model, ckpt::part(restored, "model"));
  // The optimizer's moments take the restored parameters' layout; then their saved values.
  nnx::optim::Optimizer opt(model, nnx::optim::adam(1e-2));
  opt.load_state(
      ckpt::part(manager.restore(ckpt::latest, ckpt::combine({{"opt", opt.state()}})), "opt"));
  const double loss = nnx::gather(loss_on(model, mesh)).item<double>();
  if (nnx::world_rank() == 0)
    fmt::print("restored step {} onto {}: loss {:.6f}, optimizer step {}, up.kernel {} per rank\n",
               *manager.latest_step(), mesh->to_string(), loss, opt.step(),
               nnx::to_string(model.up.kernel.tensor().sizes().vec()));
  return 0;
}
