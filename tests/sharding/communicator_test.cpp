// Collectives of the MPI engine against values computed locally, on 1, 2, 4 and 8 ranks.
#include "../catch_after_torch.h"

#include "sharding_test_util.h"

#include <nnx/nnx.h>

#include <torch/types.h>

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

TEST_CASE("the _into forms write the returning forms' values into the caller's output",
          "[ranks2][ranks4][ranks8]") {
  auto world = nnx::Communicator::world();
  const int n = world.size(), me = world.rank();
  const bool full_check = GENERATE(true, false);  // the full check, or the fingerprint alone
  nnx_test::CheckingMode checking(full_check);
  for (auto dtype : {at::kDouble, at::kFloat, at::kLong, at::kBFloat16}) {
    const auto opts = torch::TensorOptions().dtype(dtype);
    auto x = contribution(me, {2 * n, 3}, dtype);
    std::vector<at::Tensor> all;
    at::Tensor sum = torch::zeros({2 * n, 3}, torch::kDouble);
    for (int r = 0; r < n; ++r) {
      all.push_back(contribution(r, {2 * n, 3}, dtype));
      sum += all.back().to(torch::kDouble);
    }
    // Gathered rows, as [n * rows, 3] or stacked [n, rows, 3]: the output keeps its memory.
    auto gathered = torch::full({2 * n * n, 3}, -1, opts);
    world.all_gather_into(gathered, x);
    CHECK(torch::equal(gathered, torch::cat(all, 0)));
    auto stacked = torch::full({n, 2 * n, 3}, -1, opts);
    world.all_gather_into(stacked, x);
    CHECK(torch::equal(stacked, torch::stack(all, 0)));

    // Member me keeps rows [2 me, 2 me + 2) of the sum (bfloat16 summed in float32).
    auto part = torch::full({2, 3}, -1, opts);
    world.reduce_scatter_into(part, x);
    CHECK(torch::equal(part.to(torch::kDouble),
                       sum.to(dtype).to(torch::kDouble).slice(0, 2 * me, 2 * me + 2)));

    // Rows [2 j, 2 j + 2) go to member j; received parts lie in member order.
    std::vector<at::Tensor> received;
    for (int r = 0; r < n; ++r) received.push_back(all[r].slice(0, 2 * me, 2 * me + 2));
    auto exchanged = torch::full({2 * n, 3}, -1, opts);
    world.all_to_all_into(exchanged, x);
    CHECK(torch::equal(exchanged, torch::cat(received, 0)));
  }
  // An input that shares the output's memory: in place, as FSDP gathers into its flat buffer
  // and all_to_all_single exchanges in place.
  auto flat = torch::full({2 * n}, -1.0, torch::kDouble);
  flat.slice(0, 2 * me, 2 * me + 2).copy_(contribution(me, {2}));
  world.all_gather_into(flat, flat.slice(0, 2 * me, 2 * me + 2));
  std::vector<at::Tensor> pieces;
  for (int r = 0; r < n; ++r) pieces.push_back(contribution(r, {2}));
  CHECK(torch::equal(flat, torch::cat(pieces, 0)));
  auto swapped = contribution(me, {2 * n});
  world.all_to_all_into(swapped, swapped);
  std::vector<at::Tensor> sent_to_me;
  for (int r = 0; r < n; ++r)
    sent_to_me.push_back(contribution(r, {2 * n}).slice(0, 2 * me, 2 * me + 2));
  CHECK(torch::equal(swapped, torch::cat(sent_to_me, 0)));
  auto summed = contribution(me, {2 * n});
  world.reduce_scatter_into(summed.slice(0, 0, 2), summed);
  at::Tensor total = torch::zeros({2 * n}, torch::kDouble);
  for (int r = 0; r < n; ++r) total += contribution(r, {2 * n});
  CHECK(torch::equal(summed.slice(0, 0, 2), total.slice(0, 2 * me, 2 * me + 2)));

  // A non-contiguous input is taken in its logical order.
  auto x = contribution(me, {3, 2 * n}).t();
  auto part = torch::empty({2, 3}, torch::kDouble);
  world.reduce_scatter_into(part, x);
  CHECK(torch::equal(part, world.reduce_scatter(x.contiguous(), 0)));

  auto y = contribution(me, {n, 2});
  CHECK_THROWS_WITH(world.all_gather_into(torch::empty({n * 2 + 1}, torch::kDouble), y),
                    Contains("the output must be a contiguous Double tensor on cpu with") &&
                        Contains("got Double (" + std::to_string(n * 2 + 1) + ")"));
  CHECK_THROWS_WITH(world.all_to_all_into(torch::empty({n, 2}, torch::kFloat), y),
                    Contains("got Float"));
  auto strided = torch::empty({2, 2}, torch::kDouble).slice(1, 0, 1);  // 2 elements, stride 2
  CHECK_THROWS_WITH(world.reduce_scatter_into(strided, y), Contains("not contiguous"));
  // Still in step after the errors.
  auto ok = torch::empty({n, 2}, torch::kDouble);
  world.all_to_all_into(ok, y);
  CHECK(ok.select(0, 0).equal(contribution(0, {n, 2}).select(0, me)));
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
  auto out = torch::empty({3, 2});
  world.all_gather_into(out, x);
  CHECK(torch::equal(out, x.reshape({3, 2})));
  world.reduce_scatter_into(out, x * 2);
  CHECK(torch::equal(out, x.reshape({3, 2}) * 2));
  world.all_to_all_into(out, x * 3);
  CHECK(torch::equal(out, x.reshape({3, 2}) * 3));
  CHECK(torch::equal(world.permute(x, {{0, 0}}), x));
  CHECK(torch::equal(world.permute(x, {}), torch::zeros_like(x)));
}
