// Redistribute between every pair of shardings of a 2-d array on 2-d meshes: exact values, the
// right collectives, and gradients that follow the dual-placement rule.
#include "../catch_after_torch.h"

#include "sharding_test_util.h"

using namespace nnx_test;
using Catch::Matchers::Contains;

namespace {
at::Tensor global_value() {
  return torch::arange(64, torch::kDouble).reshape({8, 8}) * 0.5 - 3;
}
}  // namespace

TEST_CASE("redistribute between all pairs of 2-d shardings is exact, forward and backward",
          "[ranks2][ranks4][ranks8]") {
  const auto full = global_value();
  const auto cotangent = torch::arange(64, torch::kDouble).reshape({8, 8}).flip(0) * 0.25;
  for (const auto& shape : meshes_2d(nnx::world_size())) {
    auto mesh = nnx::make_mesh(shape, {"a", "b"});
    for (const auto& from : all_specs_2d())
      for (const auto& to : all_specs_2d()) {
        INFO(mesh->to_string() << " " << from.to_string() << " -> " << to.to_string());
        auto x = nnx::device_put(full, {mesh, from});
        auto leaf = x.local().detach().requires_grad_(true);
        auto y = nnx::redistribute(x.with_local(leaf), to);
        CHECK(y.spec() == to);
        CHECK(torch::equal(y.local().cpu(), block_of(full, y)));
        CHECK(torch::equal(nnx::gather(y).cpu(), full));
        y.local().backward(seed_cotangent(cotangent, y));
        CHECK(torch::equal(exact_gradient(leaf.grad(), x).cpu(), block_of(cotangent, x)));
      }
  }
}

TEST_CASE("pending sums resolve by reduce_scatter or all_reduce, with exact gradients",
          "[ranks2][ranks4][ranks8]") {
  const auto full = global_value();
  const auto cotangent = torch::arange(64, torch::kDouble).reshape({8, 8}) * 0.125;
  for (const auto& shape : meshes_2d(nnx::world_size())) {
    auto mesh = nnx::make_mesh(shape, {"a", "b"});
    for (const auto& to : all_specs_2d()) {
      INFO(mesh->to_string() << " Partial('b') -> " << to.to_string());
      // Each process on axis b holds full / size(b): the pieces sum to the value.
      auto local = (full / static_cast<double>(mesh->axis_size("b"))).narrow(0, 0, 8);
      auto base = nnx::device_put(local, {mesh, nnx::P("a", nnx::none)});
      auto leaf = base.local().detach().requires_grad_(true);
      auto x = nnx::Array::from_local(leaf, {8, 8}, {mesh, nnx::P("a", nnx::none)}, {"b"});
      nnx::redistribute_counts() = {};
      auto y = nnx::redistribute(x, to);
      CHECK(torch::allclose(y.local().cpu(), block_of(full, y), 0, 1e-12));
      // Into a dim that gains 'b' after what it holds: one reduce_scatter, no all_reduce.
      const bool gains_b = (to[0] == nnx::SpecEntry("a") && to[1] == nnx::SpecEntry("b")) ||
                           to[0] == nnx::SpecEntry({"a", "b"});
      if (mesh->axis_size("b") > 1 && gains_b) {
        CHECK(nnx::redistribute_counts().reduce_scatter == 1);
        CHECK(nnx::redistribute_counts().all_reduce == 0);
      }
      y.local().backward(seed_cotangent(cotangent, y));
      // A Partial input's gradient is the exact gradient on every process.
      CHECK(torch::allclose(exact_gradient(leaf.grad(), x).cpu(), block_of(cotangent, x), 0,
                            1e-12));
    }
  }
}

TEST_CASE("redistribute picks the cheap collective for common moves", "[ranks4][ranks8]") {
  auto mesh = nnx::make_mesh({2, nnx::world_size() / 2}, {"a", "b"});
  auto x = nnx::device_put(global_value(), {mesh, nnx::P("b", nnx::none)});
  auto& counts = nnx::redistribute_counts();
  counts = {};
  (void)nnx::redistribute(x, nnx::P(nnx::none, "b"));
  CHECK(counts.all_to_all == 1);
  CHECK(counts.collectives() == 1);
  counts = {};
  (void)nnx::redistribute(x, nnx::P("b", "a"));
  CHECK(counts.collectives() == 0);
  CHECK(counts.local_slice == 1);
  counts = {};
  (void)nnx::redistribute(x, nnx::P());
  CHECK(counts.all_gather == 1);
  CHECK(counts.collectives() == 1);
  counts = {};
  (void)nnx::redistribute(x, nnx::P({"b", "a"}, nnx::none));
  CHECK(counts.collectives() == 0);
}

TEST_CASE("arrays from each process's own rows", "[ranks2][ranks4][ranks8]") {
  const int n = nnx::world_size(), me = nnx::world_rank();
  auto mesh = nnx::make_mesh({n}, {"data"});
  auto rows = torch::full({2, 3}, static_cast<double>(me));
  auto batch = nnx::make_array_from_process_local_data({mesh, nnx::P("data")}, rows);
  CHECK(batch.shape() == nnx::Shape{2 * n, 3});
  auto whole = nnx::gather(batch).cpu();
  for (int r = 0; r < n; ++r) CHECK(torch::equal(whole.narrow(0, 2 * r, 2), torch::full({2, 3}, double(r))));
}

TEST_CASE("bad shardings are errors naming the array and the fix", "[ranks2][ranks4][ranks8]") {
  auto mesh = nnx::make_mesh({nnx::world_size()}, {"data"});
  auto full = torch::zeros({3 * nnx::world_size() + 1, 2});
  CHECK_THROWS_WITH(nnx::device_put(full, {mesh, nnx::P("data")}),
                    Contains("device_put: dim 0") && Contains("not divisible"));
  CHECK_THROWS_WITH(nnx::device_put(full, {mesh, nnx::P("model")}),
                    Contains("axis 'model'") && Contains("use one of (data)"));
  CHECK_THROWS_WITH(nnx::device_put(full, {mesh, nnx::P(nnx::none, nnx::none, "data")}),
                    Contains("3 entries but the array has rank 2"));
  auto ok = torch::zeros({2 * nnx::world_size(), 2});
  CHECK_THROWS_WITH(nnx::device_put(ok, {mesh, nnx::P("data", "data")}), Contains("twice"));
}
