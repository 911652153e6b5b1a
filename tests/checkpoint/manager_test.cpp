// CheckpointManager: retention (max_to_keep, keep_period), the save interval, latest_step, and
// asynchronous saves that let training go on and restore what was saved.
#include "checkpoint_test_util.h"

#include <torch/utils.h>

using Catch::Matchers::Contains;
namespace ckpt = nnx::checkpoint;

namespace {

nnx::State step_state(int64_t step) {
  nnx::State s;
  s.add("w", nnx::Param(torch::full({4, 3}, static_cast<float>(step))));
  return s;
}

}  // namespace

TEST_CASE("the manager keeps the newest checkpoints and every keep_period-th, at its interval") {
  nnx_test::SharedDir dir;
  ckpt::CheckpointManager manager(dir.path(),
                                  {.max_to_keep = 2, .save_interval_steps = 2, .keep_period = 4});
  CHECK_FALSE(manager.latest_step().has_value());
  CHECK_THROWS_WITH(manager.restore(ckpt::latest, step_state(0)),
                    Contains("holds no committed checkpoint"));
  for (int64_t step = 0; step < 10; ++step)
    CHECK(manager.save(step, step_state(step)) == (step % 2 == 0));
  CHECK(manager.all_steps() == std::vector<int64_t>{0, 4, 6, 8});
  CHECK(manager.latest_step() == 8);
  CHECK(torch::equal(manager.restore(ckpt::latest, step_state(0))["w"].tensor(),
                     torch::full({4, 3}, 8.0f)));
  CHECK(torch::equal(manager.restore(4, step_state(0))["w"].tensor(), torch::full({4, 3}, 4.0f)));
  // A directory without a manifest (an interrupted save) is not a checkpoint.
  std::filesystem::create_directories(dir.sub("12"));
  nnx_test::write_bytes(dir.sub("12/rank-00000.safetensors"), "partial");
  CHECK(manager.latest_step() == 8);
  CHECK_THROWS_WITH(ckpt::CheckpointManager(dir.path(), {.save_interval_steps = 0}),
                    Contains("save_interval_steps must be >= 1"));
}

TEST_CASE("asynchronous saves write what was saved while training goes on",
          "[ranks2][ranks4][ranks8]") {
  nnx_test::SharedDir dir;
  auto mesh = nnx::make_mesh({nnx::world_size()}, {"data"});
  nnx::LogicalAxisRules rules({{"mlp", "data"}, {"embed", nnx::none}});
  nnx::MeshContext on(mesh);
  nnx::Rngs rngs(0, {{"dropout", 1}});
  nnx_test::CkptNet model(rngs);
  nnx::optim::Optimizer opt(model, nnx::optim::adam(1e-2));
  ckpt::CheckpointManager manager(dir.path(), {.max_to_keep = 2, .async = true});
  std::map<int64_t, std::map<std::string, at::Tensor>> snapshots;
  for (int64_t step = 0; step < 4; ++step) {
    auto state = ckpt::combine({{"model", nnx::state(model)}, {"opt", opt.state()}});
    snapshots[step] = nnx_test::whole_values(state);
    CHECK(manager.save(step, state));
    // Training goes on (with its own collectives) while the save is in flight.
    torch::manual_seed(step);
    auto x = nnx::device_put(torch::randn({2 * nnx::world_size(), 8}), {mesh, nnx::P("data")});
    auto [loss, grads] = nnx::value_and_grad(
        [&](nnx_test::CkptNet& m) { return nnx::mean(nnx::square(m(x))); }, model);
    opt.update(model, grads);
  }
  manager.wait_until_finished();
  CHECK(manager.all_steps() == std::vector<int64_t>{2, 3});
  auto target = ckpt::combine({{"model", nnx::state(model)}, {"opt", opt.state()}});
  for (int64_t step : {2, 3}) {
    INFO("step " << step);
    nnx_test::check_bitwise_equal(snapshots[step],
                                  nnx_test::whole_values(manager.restore(step, target)));
  }
}

TEST_CASE("restoring the latest step needs every rank to see the same latest step", "[ranks2]") {
  // Each rank's own directory (as on node-local disks): rank 0 sees step 3, rank 1 step 5.
  nnx_test::SharedDir dir;
  const std::string mine = dir.sub(fmt::format("rank{}", nnx::world_rank()));
  const int64_t step = nnx::world_rank() == 0 ? 3 : 5;
  std::filesystem::create_directories(fmt::format("{}/{}", mine, step));
  nnx_test::write_bytes(fmt::format("{}/{}/manifest.json", mine, step), "{}");
  ckpt::CheckpointManager manager(mine);
  CHECK(manager.latest_step() == step);  // a local question: each rank's own listing
  CHECK_THROWS_WITH(manager.restore(ckpt::latest, step_state(0)),
                    Contains("the ranks see different latest checkpoints") &&
                        Contains("steps 3 to 5"));
}
