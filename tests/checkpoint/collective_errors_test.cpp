// A failure inside a collective checkpoint call on one rank reaches every rank as an error (no
// rank is left waiting): a state that one rank cannot plan, a manager whose directory rank 0
// cannot create.
#include "checkpoint_test_util.h"

#include <fstream>

using Catch::Matchers::Contains;
namespace ckpt = nnx::checkpoint;

namespace {
// The same paths everywhere, but rank 1's 'w' has a dtype checkpoints cannot store.
nnx::State state_failing_on_rank_1() {
  nnx::State s;
  auto dtype = nnx::world_rank() == 1 ? torch::kComplexFloat : torch::kFloat;
  s.add("w", nnx::Param(nnx::Array(torch::ones({2, 2}, dtype))));
  return s;
}
}  // namespace

TEST_CASE("a save that one rank cannot plan fails on every rank, naming that rank", "[ranks2]") {
  nnx_test::SharedDir dir;
  const std::string message = nnx::world_rank() == 1 ? "which checkpoints do not store"
                                                     : "rank 1 failed: ";
  CHECK_THROWS_WITH(ckpt::save(dir.sub("c"), state_failing_on_rank_1()),
                    Contains(message) && Contains("'w'"));
  ckpt::CheckpointManager manager(dir.sub("run"), {.async = true});
  CHECK_THROWS_WITH(manager.save(1, state_failing_on_rank_1()), Contains(message));
  CHECK_FALSE(manager.latest_step());
  // Every rank is still in step: the next collective save works.
  nnx::State good;
  good.add("w", nnx::Param(nnx::Array(torch::ones({2, 2}))));
  CHECK(manager.save(2, good));
  manager.wait_until_finished();
  CHECK(manager.latest_step() == 2);
}

TEST_CASE("options one rank cannot store fail the save on every rank, before any write",
          "[ranks2]") {
  nnx_test::SharedDir dir;
  nnx::State s;
  s.add("w", nnx::Param(nnx::Array(torch::ones({2, 2}))));
  // Rank 1's loader position is not valid UTF-8: it used to throw there alone, and rank 0 waited
  // for its records forever.
  const nlohmann::json mine = nnx::world_rank() == 1 ? nlohmann::json(std::string("\xff"))
                                                     : nlohmann::json("fine");
  const std::string message = nnx::world_rank() == 1 ? "valid UTF-8" : "rank 1 failed: ";
  CHECK_THROWS_WITH(ckpt::save(dir.sub("c"), s, {.per_rank = mine}), Contains(message));
  CHECK_FALSE(std::filesystem::exists(dir.sub("c/rank-00000.safetensors")));
  ckpt::save(dir.sub("c"), s, {.per_rank = nnx::world_rank()});
  CHECK(ckpt::restore_per_rank(dir.sub("c")) == nnx::world_rank());
}

TEST_CASE("a save that two ranks cannot plan names both ranks on every rank", "[ranks4]") {
  nnx_test::SharedDir dir;
  nnx::State s;
  const bool fails = nnx::world_rank() % 2 == 1;
  s.add("w", nnx::Param(nnx::Array(torch::ones({2, 2}, fails ? torch::kComplexFloat : torch::kFloat))));
  CHECK_THROWS_WITH(ckpt::save(dir.sub("c"), s),
                    Contains("ranks 1, 3 failed") && Contains("which checkpoints do not store"));
  CHECK_FALSE(std::filesystem::exists(dir.sub("c") + "/manifest.json"));
}

TEST_CASE("a manager whose directory rank 0 cannot create fails on every rank", "[ranks2]") {
  nnx_test::SharedDir dir;
  if (nnx::world_rank() == 0) std::ofstream(dir.sub("file")) << "not a directory";
  nnx::Communicator::world().barrier();
  CHECK_THROWS_WITH(ckpt::CheckpointManager(dir.sub("file/run")),
                    Contains("cannot create the checkpoint directory") && Contains("file/run"));
}

TEST_CASE("a variable only some ranks hold is refused on every rank, nothing saved", "[ranks2]") {
  // Rank 0 writes a variable that lies on no mesh; here only rank 1 has 'extra', so it would be
  // dropped without a word. And 'w' differs in shape between the ranks.
  nnx_test::SharedDir dir;
  nnx::State s;
  s.add("w", nnx::Param(nnx::Array(torch::ones({2, nnx::world_rank() == 0 ? 2 : 3}))));
  if (nnx::world_rank() == 1) s.add("extra", nnx::Param(nnx::Array(torch::zeros({4}))));
  CHECK_THROWS_WITH(ckpt::save(dir.sub("c"), s),
                    Contains("nothing was saved: the ranks' states differ") &&
                        Contains("rank 1 has extra F32 4") && Contains("rank 1 has w F32 2x3") &&
                        Contains("rank 1 lacks w F32 2x2"));
  CHECK_FALSE(std::filesystem::exists(dir.sub("c/manifest.json")));
  // The same state everywhere saves.
  nnx::State same;
  same.add("w", nnx::Param(nnx::Array(torch::ones({2, 2}))));
  ckpt::save(dir.sub("d"), same);
  CHECK(std::filesystem::exists(dir.sub("d/manifest.json")));
}

TEST_CASE("a restore that fails on one rank fails on every rank", "[ranks2]") {
  // Each rank writes its own block; rank 1's file is then cut short. Rank 0 could read its own
  // blocks, but must not carry on with a state rank 1 could not restore.
  nnx_test::SharedDir dir;
  auto mesh = nnx::make_mesh({2}, {"x"});
  nnx::State s;
  s.add("w", nnx::Param(nnx::device_put(torch::arange(8.0).reshape({4, 2}), {mesh, nnx::P("x")})));
  ckpt::save(dir.sub("c"), s);
  if (nnx::world_rank() == 0)
    std::filesystem::resize_file(dir.sub("c/rank-00001.safetensors"), 100);
  nnx::Communicator::world().barrier();
  const std::string message = nnx::world_rank() == 1 ? "rank-00001.safetensors" : "rank 1 failed: ";
  CHECK_THROWS_WITH(ckpt::restore(dir.sub("c"), s), Contains(message));
  // Still in step.
  nnx::Communicator::world().barrier();
}
