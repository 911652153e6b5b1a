// shard_map and its collectives: values as jax.lax defines them and gradients as their
// transposes, on 2, 4 and 8 ranks.
#include "../catch_after_torch.h"

#include "sharding_test_util.h"

#include <torch/utils.h>

using namespace nnx_test;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {
std::shared_ptr<const nnx::Mesh> mesh_2d() {
  int n = nnx::world_size();
  return nnx::make_mesh({n >= 2 ? n / 2 : 1, n >= 2 ? 2 : 1}, {"i", "j"});
}
}  // namespace

TEST_CASE("shard_map runs local code on blocks and assembles the output",
          "[ranks2][ranks4][ranks8]") {
  auto mesh = mesh_2d();
  torch::manual_seed(0);
  auto x = torch::randn({8, 6}, torch::kDouble), w = torch::randn({6, 4}, torch::kDouble),
       b = torch::randn({4}, torch::kDouble);
  auto f = nnx::shard_map(
      [](at::Tensor x, at::Tensor w, at::Tensor b) { return x.matmul(w) + b; }, mesh,
      {nnx::P("i", nnx::none), nnx::P(nnx::none, "j"), nnx::P("j")}, nnx::P("i", "j"));
  auto y = f(x, w, b);
  CHECK(y.shape() == nnx::Shape{8, 4});
  CHECK(torch::allclose(nnx::gather(y).cpu(), x.matmul(w) + b));
  CHECK(y.local().size(0) == 8 / mesh->axis_size("i"));
}

TEST_CASE("psum, pmean and parallel normalization match the whole computation",
          "[ranks2][ranks4][ranks8]") {
  auto mesh = mesh_2d();
  torch::manual_seed(1);
  auto x = torch::randn({8, 4}, torch::kDouble);
  auto normalize = nnx::shard_map(
      [](at::Tensor x) {
        auto mean = nnx::pmean(x, "j");
        auto var = nnx::pmean((x - mean) * (x - mean), "j");
        return (x - mean) / var.sqrt();
      },
      mesh, {nnx::P("i", "j")}, nnx::P("i", "j"));
  auto out = nnx::gather(normalize(x)).cpu();
  // The per-shard statistics along j: elementwise over the j groups.
  const int64_t nj = mesh->axis_size("j");
  auto blocks = x.reshape({8, nj, 4 / nj});
  auto mean = blocks.mean(1, true);
  auto var = ((blocks - mean) * (blocks - mean)).mean(1, true);
  CHECK(torch::allclose(out, ((blocks - mean) / var.sqrt()).reshape({8, 4})));
}

TEST_CASE("all_gather, psum_scatter, ppermute and all_to_all follow jax.lax",
          "[ranks2][ranks4][ranks8]") {
  auto mesh = nnx::make_mesh({nnx::world_size()}, {"i"});
  const int64_t n = nnx::world_size();
  auto x = torch::arange(n * 2 * n, torch::kDouble).reshape({n * 2, n});
  auto gather_rows = nnx::shard_map([](at::Tensor w) { return nnx::all_gather(w, "i", 0, true); },
                                    mesh, {nnx::P("i", nnx::none)}, nnx::P());
  CHECK(torch::equal(gather_rows(x).local().cpu(), x));
  auto stacked = nnx::shard_map([](at::Tensor w) { return nnx::all_gather(w, "i", 0, false); },
                                mesh, {nnx::P("i", nnx::none)}, nnx::P());
  CHECK(torch::equal(stacked(x).local().cpu(), x.reshape({n, 2, n})));
  // psum_scatter over dim 1 (the seed's scatter_example): each gets one column of the sum.
  auto scatter = nnx::shard_map([](at::Tensor v) { return nnx::psum_scatter(v, "i", 1, true); },
                                mesh, {nnx::P("i", nnx::none)}, nnx::P("i", nnx::none));
  auto blocks = x.reshape({n, 2, n});
  auto summed = blocks.sum(0);  // [2, n]
  auto scattered = scatter(x);
  CHECK(torch::equal(scattered.local().cpu(), summed.narrow(1, nnx::world_rank(), 1)));
  auto ring = nnx::shard_map(
      [n](at::Tensor v) {
        std::vector<std::pair<int, int>> perm;
        for (int i = 0; i < n; ++i) perm.emplace_back(i, (i + 1) % n);
        return nnx::ppermute(v, "i", perm);
      },
      mesh, {nnx::P("i")}, nnx::P("i"));
  auto seq = torch::arange(n, torch::kDouble);
  CHECK(torch::equal(nnx::gather(ring(seq)).cpu(), seq.roll(1)));
  auto swap = nnx::shard_map([](at::Tensor v) { return nnx::all_to_all(v, "i", 1, 0); }, mesh,
                             {nnx::P("i", nnx::none)}, nnx::P(nnx::none, "i"));
  auto y = torch::arange(2 * n * 2 * n, torch::kDouble).reshape({2 * n, 2 * n});
  CHECK(torch::equal(nnx::gather(swap(y)).cpu(), y));
}

TEST_CASE("axis_index and fold_in over an axis give per-device values",
          "[ranks2][ranks4][ranks8]") {
  auto mesh = mesh_2d();
  auto idx = nnx::shard_map(
      []() {
        return torch::tensor({nnx::axis_index("i"), nnx::axis_index("j")}, torch::kLong)
            .unsqueeze(0);
      },
      mesh, {}, nnx::P({"i", "j"}));
  auto all = nnx::gather(idx());
  for (int64_t r = 0; r < mesh->size(); ++r) {
    auto c = mesh->coordinates_of(r);
    CHECK(all[r][0].item<int64_t>() == c[0]);
    CHECK(all[r][1].item<int64_t>() == c[1]);
  }
  auto key = nnx::random::key(0);
  auto keys = nnx::shard_map(
      [key]() {
        auto k = nnx::fold_in_axis(key, "i");
        return torch::tensor({int64_t(k.words[0]), int64_t(k.words[1])}, torch::kLong).unsqueeze(0);
      },
      mesh, {}, nnx::P({"i", "j"}));
  auto got = nnx::gather(keys());
  for (int64_t r = 0; r < mesh->size(); ++r) {
    auto expect = nnx::random::fold_in(key, static_cast<uint32_t>(mesh->coordinates_of(r)[0]));
    CHECK(got[r][0].item<int64_t>() == expect.words[0]);
    CHECK(got[r][1].item<int64_t>() == expect.words[1]);
  }
}

TEST_CASE("collectives inside shard_map are differentiable with their transposes",
          "[ranks2][ranks4][ranks8]") {
  auto mesh = nnx::make_mesh({nnx::world_size()}, {"i"});
  const int64_t n = nnx::world_size();
  torch::manual_seed(2);
  auto w_full = torch::randn({2 * n, 3}, torch::kDouble);
  auto x_full = torch::randn({4, 2 * n}, torch::kDouble);
  // y = x @ all_gather(w): gradient of the sharded w must be the block of the whole gradient.
  auto w = nnx::device_put(w_full, {mesh, nnx::P("i", nnx::none)});
  auto leaf = w.local().detach().requires_grad_(true);
  auto f = nnx::shard_map(
      [](at::Tensor x, at::Tensor w) { return x.matmul(nnx::all_gather(w, "i", 0, true)); }, mesh,
      {nnx::P(), nnx::P("i", nnx::none)}, nnx::P());
  auto y = f(nnx::device_put(x_full, {mesh, nnx::P()}), w.with_local(leaf));
  auto g = torch::ones({4, 3}, torch::kDouble);
  y.local().backward(seed_cotangent(g, y));
  auto wt = w_full.clone().requires_grad_(true);
  x_full.matmul(wt).backward(g);
  CHECK(torch::allclose(leaf.grad().cpu(), block_of(wt.grad(), w)));
  // psum: each process's x contributes once to the replicated sum.
  auto v = nnx::device_put(torch::arange(n * 2, torch::kDouble), {mesh, nnx::P("i")});
  auto vl = v.local().detach().requires_grad_(true);
  auto s = nnx::shard_map([](at::Tensor t) { return nnx::psum(t * t, "i"); }, mesh, {nnx::P("i")},
                          nnx::P());
  auto out = s(v.with_local(vl));
  out.local().backward(seed_cotangent(torch::ones({2}, torch::kDouble), out));
  CHECK(torch::allclose(vl.grad(), 2 * vl.detach()));
}

TEST_CASE("collectives outside shard_map and wrong spec counts are clear errors",
          "[ranks2][ranks4][ranks8]") {
  auto mesh = nnx::make_mesh({nnx::world_size()}, {"i"});
  CHECK_THROWS_WITH(nnx::psum(torch::ones({1}), "i"), Contains("outside a shard_map body"));
  auto f = nnx::shard_map([](at::Tensor x) { return x; }, mesh, {nnx::P(), nnx::P()}, nnx::P());
  CHECK_THROWS_WITH(f(torch::ones({2})), Contains("1 value(s) for 2 in_specs"));
  auto g = nnx::shard_map([](at::Tensor x) { return nnx::psum(x, "k"); }, mesh, {nnx::P()}, nnx::P());
  CHECK_THROWS_WITH(g(torch::ones({2})), StartsWith("[psum] unknown mesh axis 'k'"));
  // Dims out of range name the collective, not LibTorch's unsqueeze or size.
  auto far = nnx::shard_map([](at::Tensor x) { return nnx::all_gather(x, "i", 5, false); }, mesh,
                            {nnx::P()}, nnx::P());
  CHECK_THROWS_WITH(far(torch::ones({2})),
                    Contains("all_gather: dim 5 lies outside a tensor of 2 dims"));
  auto scalar = nnx::shard_map(
      [](at::Tensor x) { return nnx::psum_scatter(x.sum(), "i", 0, true); }, mesh, {nnx::P()},
      nnx::P());
  CHECK_THROWS_WITH(scalar(torch::ones({2})),
                    Contains("psum_scatter: dim 0 lies outside a tensor of 0 dims"));
}

TEST_CASE("visualize_sharding draws who holds which block", "[ranks8]") {
  auto mesh = nnx::make_mesh({2, 4}, {"a", "b"});
  auto x = nnx::device_put(torch::zeros({8, 8}), {mesh, nnx::P("a", "b")});
  auto picture = nnx::visualize_sharding(x);
  CHECK_THAT(picture, Contains("| rank 0 | rank 1 | rank 2 | rank 3 |"));
  CHECK_THAT(picture, Contains("| rank 4 | rank 5 | rank 6 | rank 7 |"));
  auto rows = nnx::device_put(torch::zeros({8, 8}), {mesh, nnx::P("a", nnx::none)});
  CHECK_THAT(nnx::visualize_sharding(rows), Contains("ranks 0,1,2,3") && Contains("ranks 4,5,6,7"));
  auto vec = nnx::device_put(torch::zeros({8}), {mesh, nnx::P("b")});
  CHECK_THAT(nnx::visualize_sharding(vec), Contains("| ranks 0,4 | ranks 1,5 | ranks 2,6 | ranks 3,7 |"));
}

TEST_CASE("visualize_sharding of a description needs no processes") {
  auto mesh = std::make_shared<nnx::Mesh>(std::vector<int64_t>{2, 2}, std::vector<std::string>{"x", "y"});
  auto picture = nnx::visualize_sharding({4, 4}, {mesh, nnx::P("y", "x")});
  CHECK(picture ==
        "+--------+--------+\n"
        "| rank 0 | rank 2 |\n"
        "+--------+--------+\n"
        "| rank 1 | rank 3 |\n"
        "+--------+--------+\n"
        "shape (4, 4) PartitionSpec('y', 'x') on Mesh('x': 2, 'y': 2)\n");
}
