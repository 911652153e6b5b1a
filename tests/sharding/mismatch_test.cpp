// Collectives whose calls differ across ranks are errors on every rank, not garbage or a hang:
// with the full check off, by the always-on fingerprint (dtype, element count) and make_mesh's
// agreement; with it on (NNX_CHECK_COLLECTIVES=1), also by call path, naming each rank's line.
#include "../catch_after_torch.h"

#include "sharding_test_util.h"

#include <nnx/nnx.h>
#include <nnx/sharding/detail/fingerprint_board.h>

#include <torch/types.h>

using Catch::Matchers::Contains;

TEST_CASE("collectives that differ across ranks are errors with the check off",
          "[ranks2][ranks4]") {
  nnx_test::CheckingMode checking(false);
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
  CHECK(torch::equal(same, torch::full({4}, static_cast<float>(world.size()))));
}

TEST_CASE("fingerprinted collectives stay in step over long mixed runs",
          "[ranks2][ranks4][ranks8]") {
  // Broadcast roots and permute senders may run a collective ahead of the others; every value
  // must still be right and no mismatch reported.
  nnx_test::CheckingMode checking(false);
  auto world = nnx::Communicator::world();
  const int n = world.size(), me = world.rank();
  auto out = torch::empty({n});
  for (int i = 0; i < 300; ++i) {
    auto b = torch::full({3}, static_cast<float>(me == i % n ? i : -1));
    world.broadcast_(b, i % n);
    REQUIRE(torch::equal(b, torch::full({3}, static_cast<float>(i))));
    auto shifted = world.permute(torch::full({2}, static_cast<float>(me)), {{i % n, (i + 1) % n}});
    const float expect = me == (i + 1) % n ? static_cast<float>(i % n) : 0.f;
    REQUIRE(torch::equal(shifted, torch::full({2}, expect)));
    world.all_to_all_into(out, torch::full({n}, static_cast<float>(me + i)));
    REQUIRE(torch::equal(out, torch::arange(n).to(torch::kFloat) + i));
  }
  auto mismatched = torch::ones({me == 0 ? 5 : 4});
  CHECK_THROWS_WITH(world.all_reduce_(mismatched), Contains("members disagree on the collective"));
  // The ranks of a test share one machine: they compared on the shared-memory board, unless
  // told to compare by all-reduce.
  const char* board = std::getenv("NNX_FINGERPRINT_BOARD");
  if (board != nullptr && std::string(board) == "0")
    CHECK(nnx::detail::fingerprint_boards_open() == 0);
  else
    CHECK(nnx::detail::fingerprint_boards_open() >= 1);
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

// With the full check, two calls of the same op and shape from different lines are told apart
// by their call paths, and each rank's message names every rank's line. Without it, rank 0's
// gather of `a` would pair with rank 1's gather of `b`: mixed values, then a hang.
TEST_CASE("the full check names both call sites of a collective reached from different lines",
          "[ranks2]") {
  nnx_test::CheckingMode checking(true);
  auto mesh = nnx::make_mesh({2}, {"x"});
  auto a = nnx::device_put(torch::zeros({4, 2}), {mesh, nnx::P("x")});
  auto b = nnx::device_put(torch::full({4, 2}, 8.f), {mesh, nnx::P("x")});
  const bool first = nnx::world_rank() == 0;
  const int line_a = __LINE__ + 3;
  const int line_b = __LINE__ + 3;
  auto program = [&] {
    if (first) (void)nnx::gather(a);
    return nnx::gather(b);
  };
  const std::string file = "tests/sharding/mismatch_test.cpp:";
  CHECK_THROWS_WITH(program(),
                    Contains("members disagree on the collective") &&
                        Contains("rank 0: collective #") && Contains("rank 1: collective #") &&
                        Contains(file + std::to_string(line_a)) &&
                        Contains(file + std::to_string(line_b)));
  // Direct communicator calls record no line: the frame where the paths part is named.
  auto world = nnx::Communicator::world();
  auto x = torch::ones({3});
  auto direct = [&] {
    if (first) world.all_reduce_(x);
    world.all_reduce_(x);
  };
  try {
    direct();
    FAIL("two all_reduce calls from different lines were let through");
  } catch (const nnx::Error& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Contains("members disagree") && Contains("no recorded line, in "));
    CHECK_THAT(what, !Contains("the same call path"));
  }
  // Still in step, and an agreeing program passes the check.
  CHECK(torch::equal(nnx::gather(b).cpu(), torch::full({4, 2}, 8.f)));
  world.barrier();
}

TEST_CASE("barriers take part in the check", "[ranks2]") {
  auto world = nnx::Communicator::world();
  auto x = torch::ones({2});
  // A barrier on one rank against an all-reduce on the other: an error, not a hang.
  auto program = [&] {
    if (world.rank() == 0) world.barrier();
    else world.all_reduce_(x);
  };
  CHECK_THROWS_WITH(program(), Contains("members disagree on the collective"));
  world.barrier();
}
