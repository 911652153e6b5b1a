// Collectives of the MPI engine against values computed locally, on 1, 2, 4 and 8 ranks.
#include <catch2/catch.hpp>

#include "sharding_test_util.h"

#include <nnx/nnx.h>

#include <torch/torch.h>

using Catch::Matchers::Contains;

namespace {
// The tensor member r contributes: distinct per member and per element.
at::Tensor contribution(int r, at::IntArrayRef shape, at::ScalarType dtype = at::kDouble) {
  auto n = c10::multiply_integers(shape);
  return (torch::arange(n, torch::kDouble).reshape(shape) + 1000.0 * r).to(dtype);
}
}  // namespace

TEST_CASE("world collectives equal their definitions", "[ranks2][ranks4][ranks8]") {
  auto world = nnx::Communicator::world();
  const int n = world.size(), me = world.rank();
  for (auto dtype : {at::kDouble, at::kFloat, at::kLong, at::kBFloat16}) {
    // Inputs rounded to dtype, summed exactly, rounded once (bfloat16 is reduced in float32).
    at::Tensor sum = torch::zeros({3, 2 * n}, torch::kDouble);
    for (int r = 0; r < n; ++r) sum += contribution(r, {3, 2 * n}, dtype).to(torch::kDouble);
    auto x = contribution(me, {3, 2 * n}, dtype);
    auto reduced = x.clone();
    world.all_reduce_(reduced);
    CHECK(torch::equal(reduced.to(torch::kDouble), sum.to(dtype).to(torch::kDouble)));

    auto scattered = world.reduce_scatter(x, 1);
    CHECK(torch::equal(scattered.to(torch::kDouble),
                       sum.to(dtype).to(torch::kDouble).chunk(n, 1)[me]));
  }
  auto x = contribution(me, {2, 3});
  std::vector<at::Tensor> all;
  for (int r = 0; r < n; ++r) all.push_back(contribution(r, {2, 3}));
  CHECK(torch::equal(world.all_gather(x, 0), torch::cat(all, 0)));
  CHECK(torch::equal(world.all_gather(x, 1), torch::cat(all, 1)));

  // all_to_all: chunk j of member r along dim 0 goes to member j, concatenated along dim 1.
  auto y = contribution(me, {n, 4});
  std::vector<at::Tensor> received;
  for (int r = 0; r < n; ++r) received.push_back(contribution(r, {n, 4}).chunk(n, 0)[me]);
  CHECK(torch::equal(world.all_to_all(y, 0, 1), torch::cat(received, 1)));

  auto b = contribution(me, {5});
  world.broadcast_(b, n - 1);
  CHECK(torch::equal(b, contribution(n - 1, {5})));

  auto maxed = torch::full({2}, static_cast<double>(me));
  world.all_reduce_(maxed, nnx::ReduceOp::max);
  CHECK(torch::equal(maxed, torch::full({2}, static_cast<double>(n - 1))));
}

TEST_CASE("permute sends along the pairs and zero-fills the rest", "[ranks2][ranks4][ranks8]") {
  auto world = nnx::Communicator::world();
  const int n = world.size(), me = world.rank();
  std::vector<std::pair<int, int>> ring;
  for (int r = 0; r < n; ++r) ring.emplace_back(r, (r + 1) % n);
  auto x = contribution(me, {4});
  CHECK(torch::equal(world.permute(x, ring), contribution((me + n - 1) % n, {4})));
  // Only 0 -> 1: member 1 receives, everyone else gets zeros.
  auto out = world.permute(x, {{0, 1}});
  CHECK(torch::equal(out, me == 1 ? contribution(0, {4}) : torch::zeros({4}, torch::kDouble)));
  CHECK_THROWS_WITH(world.permute(x, {{0, 1}, {0, 1}}), Contains("permutation"));
}

TEST_CASE("the debug mode turns a shape mismatch into an error on every rank",
          "[ranks2][ranks4][ranks8]") {
  auto world = nnx::Communicator::world();
  nnx_test::CheckingMode checking(true);
  auto x = torch::ones({world.rank() == 0 ? 3 : 2});
  CHECK_THROWS_WITH(world.all_reduce_(x), Contains("members disagree") && Contains("rank 0"));
  auto ok = torch::ones({2});
  CHECK_NOTHROW(world.all_reduce_(ok));
}

TEST_CASE("a world of one makes every collective the identity") {
  auto world = nnx::Communicator::world();
  if (world.size() != 1) return;
  auto x = torch::arange(6.0).reshape({2, 3});
  auto y = x.clone();
  world.all_reduce_(y);
  CHECK(torch::equal(y, x));
  CHECK(torch::equal(world.all_gather(x, 1), x));
  CHECK(torch::equal(world.reduce_scatter(x, 0), x));
  CHECK(torch::equal(world.all_to_all(x, 0, 1), x));
  CHECK(torch::equal(world.permute(x, {{0, 0}}), x));
  CHECK(torch::equal(world.permute(x, {}), torch::zeros_like(x)));
}
