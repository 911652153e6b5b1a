// Slicing and indexing (x[start:stop:step], x[i]) on every test mesh and layout, pending sums
// included, against LibTorch autograd on the whole tensors: a whole dim is cut locally and keeps
// its layout; a split dim is gathered once (a counted fallback).
#include "../catch_after_torch.h"

#include "ops_test_util.h"

using namespace nnx_test;
using nnx::Array;
using nnx::P;
using Catch::Matchers::Contains;

TEST_CASE("slice and select follow Python's bounds on plain arrays") {
  auto t = torch::arange(24, torch::kFloat).reshape({4, 6});
  Array x(t);
  CHECK(torch::equal(nnx::slice(x, 1, 1, 5, 2).local(), t.slice(1, 1, 5, 2)));
  CHECK(torch::equal(nnx::slice(x, 0, -3).local(), t.slice(0, 1, 4)));
  CHECK(torch::equal(nnx::slice(x, 1, 4, 100).local(), t.slice(1, 4, 6)));  // the end clamps
  CHECK(nnx::slice(x, 1, 5, 2).shape() == nnx::Shape{4, 0});               // empty, as Python
  CHECK(torch::equal(nnx::select(x, 1, -1).local(), t.select(1, 5)));
  CHECK(torch::equal(x[2].local(), t[2]));
  CHECK(x[2].shape() == nnx::Shape{6});
  CHECK_THROWS_WITH(nnx::select(x, 0, 4), Contains("index 4 is out of range for dim 0") &&
                                              Contains("(size 4)"));
  CHECK_THROWS_WITH(nnx::slice(x, 0, 0, 4, 0), Contains("step must be >= 1"));
  CHECK_THROWS_WITH(nnx::slice(x, 2, 0), Contains("slice"));
}

TEST_CASE("slice and select are exact on every layout; only a split dim is gathered",
          "[ranks2][ranks4][ranks8]") {
  const auto x = normal_values({8, 16}, 71);
  for (const auto& mesh : op_meshes())
    for (const auto& in : layouts(x, *mesh, {.tuples = true})) {
      for (int64_t dim : {0, 1}) {
        INFO("slice along dim " << dim << " of " << in.spec.to_string());
        auto sliced = check_unary(
            mesh, in, [&](const Array& a) { return nnx::slice(a, dim, 1, -1, 3); },
            [&](const at::Tensor& t) { return t.slice(dim, 1, t.size(dim) - 1, 3); },
            {.gathers = sharded_dim(in, dim)});
        if (sliced.out.defined() && sharded_dim(in, dim) == 0) {
          CHECK(sliced.out.spec() == in.spec);  // cut locally, laid out as before
          CHECK(sliced.out.partial_axes() == in.partial);
        }
        INFO("select along dim " << dim);
        check_unary(
            mesh, in, [&](const Array& a) { return nnx::select(a, dim, -2); },
            [&](const at::Tensor& t) { return t.select(dim, t.size(dim) - 2); },
            {.gathers = sharded_dim(in, dim)});
      }
    }
}
