// With the debug check off (the default), collectives whose calls differ across ranks (dtype,
// element count) and ranks building different meshes are errors on every rank, not garbage:
// the always-on fingerprint and make_mesh's agreement.
#include <catch2/catch.hpp>

#include <nnx/nnx.h>

#include <torch/torch.h>

using Catch::Matchers::Contains;

TEST_CASE("collectives that differ across ranks are errors with the check off", "[ranks2]") {
  REQUIRE_FALSE(nnx::Communicator::checking());
  auto world = nnx::Communicator::world();
  const bool odd = world.rank() == 1;
  // Different dtypes: float32 bits summed as int32 elsewhere would be garbage.
  auto t = torch::ones({4}, odd ? torch::kInt : torch::kFloat);
  CHECK_THROWS_WITH(world.all_reduce_(t, nnx::ReduceOp::sum),
                    Contains("members disagree on the collective") && Contains("rank 1"));
  // Different element counts.
  auto g = torch::ones({odd ? 3 : 4});
  CHECK_THROWS_WITH(world.all_gather(g, 0), Contains("members disagree on the collective"));
  // Still in step: matching calls work.
  auto same = torch::ones({4});
  world.all_reduce_(same, nnx::ReduceOp::sum);
  CHECK(torch::equal(same, torch::full({4}, 2.f)));
}

TEST_CASE("ranks building different meshes is an error on every rank", "[ranks4]") {
  const bool first = nnx::world_rank() < 2;
  CHECK_THROWS_WITH(nnx::make_mesh(first ? std::vector<int64_t>{4, 1} : std::vector<int64_t>{1, 4},
                                   {"a", "b"}),
                    Contains("the ranks build different meshes: rank 0: shape (4, 1)") &&
                        Contains("rank 2: shape (1, 4)") && Contains("rank 3: shape (1, 4)"));
  CHECK_THROWS_WITH(nnx::make_mesh({4, 1}, {first ? "a" : "x", "b"}),
                    Contains("the ranks build different meshes"));
  auto mesh = nnx::make_mesh({2, 2}, {"a", "b"});  // still in step
  CHECK(mesh->size() == 4);
}
