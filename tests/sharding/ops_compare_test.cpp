// Comparisons, logical ops, isfinite/isnan and where on every test mesh and layout: values
// equal LibTorch's on the whole tensors (where's gradients too), ties and pending sums included.
#include "../catch_after_torch.h"

#include "ops_test_util.h"

#include <limits>

using namespace nnx_test;
using nnx::Array;
using nnx::P;

namespace {

using ArrayFn = std::function<Array(const Array&, const Array&)>;
using TensorFn = std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>;

struct Comparison {
  const char* name;
  ArrayFn op;
  TensorFn oracle;
};

const std::vector<Comparison>& comparisons() {
  static const std::vector<Comparison> ops{
      {"==", [](const Array& a, const Array& b) { return a == b; },
       [](const at::Tensor& a, const at::Tensor& b) { return a == b; }},
      {"!=", [](const Array& a, const Array& b) { return a != b; },
       [](const at::Tensor& a, const at::Tensor& b) { return a != b; }},
      {"<", [](const Array& a, const Array& b) { return a < b; },
       [](const at::Tensor& a, const at::Tensor& b) { return a < b; }},
      {"<=", [](const Array& a, const Array& b) { return a <= b; },
       [](const at::Tensor& a, const at::Tensor& b) { return a <= b; }},
      {">", [](const Array& a, const Array& b) { return nnx::greater(a, b); },
       [](const at::Tensor& a, const at::Tensor& b) { return a > b; }},
      {">=", [](const Array& a, const Array& b) { return nnx::greater_equal(a, b); },
       [](const at::Tensor& a, const at::Tensor& b) { return a >= b; }},
      {"logical_and", [](const Array& a, const Array& b) { return nnx::logical_and(a, b); },
       [](const at::Tensor& a, const at::Tensor& b) { return torch::logical_and(a, b); }},
      {"logical_or", [](const Array& a, const Array& b) { return nnx::logical_or(a, b); },
       [](const at::Tensor& a, const at::Tensor& b) { return torch::logical_or(a, b); }},
  };
  return ops;
}

void check_comparisons(const MeshPtr& mesh, const In& a, const In& b) {
  for (const auto& f : comparisons()) {
    INFO(f.name);
    check_binary(mesh, a, b, f.op, f.oracle);
  }
}

// Whole numbers 0, 1 and 2 as doubles: many ties, and zeros for the logical ops.
at::Tensor small_whole_values(const nnx::Shape& shape, uint64_t seed) {
  return integer_values(shape, 3, seed).to(torch::kDouble);
}

// where(c, x, y) with c, x and y placed as given, against torch::where.
Checked check_where(const MeshPtr& mesh, const In& c, const In& x, const In& y) {
  return check_op(
      mesh, {c, x, y},
      [](const std::vector<Array>& a) { return nnx::where(a[0], a[1], a[2]); },
      [](const std::vector<at::Tensor>& t) { return torch::where(t[0], t[1], t[2]); });
}

// The bits of a float64 tensor, so that -0.0 differs from 0.0 and NaN equals itself.
at::Tensor bits(const at::Tensor& t) { return t.contiguous().view(torch::kLong); }

}  // namespace

TEST_CASE("comparisons and logical ops are exact on every pair of layouts, ties included",
          "[ranks2][ranks4][ranks8]") {
  const auto a = small_whole_values({8, 16}, 1), b = small_whole_values({8, 16}, 2);
  for (const auto& mesh : op_meshes())
    for (const auto& [sa, sb] : spec_pairs({8, 16}, {8, 16}, *mesh))
      check_comparisons(mesh, {a, sa}, {b, sb});
}

TEST_CASE("comparisons broadcast and resolve pending sums on either side",
          "[ranks2][ranks4][ranks8]") {
  const auto a = normal_values({8, 16}, 3), b = normal_values({8, 16}, 4);
  for (const nnx::Shape& shape : {nnx::Shape{16}, nnx::Shape{8, 1}}) {
    const auto row = normal_values(shape, 5);
    for (const auto& mesh : op_meshes())
      for (const auto& sa : specs_for({8, 16}, *mesh))
        for (const auto& sr : specs_for(shape, *mesh)) {
          check_comparisons(mesh, {a, sa}, {row, sr});
          check_comparisons(mesh, {row, sr}, {a, sa});
        }
  }
  for (const auto& mesh : op_meshes())
    for (const auto& pa : pending_sum_layouts(a, *mesh)) {
      for (const auto& sb : specs_for({8, 16}, *mesh)) {
        check_comparisons(mesh, pa, {b, sb});
        check_comparisons(mesh, {b, sb}, pa);
      }
      for (const auto& pb : pending_sum_layouts(b, *mesh)) check_comparisons(mesh, pa, pb);
    }
}

TEST_CASE("scalar comparisons, logical_not, isfinite and isnan act on the whole value",
          "[ranks2][ranks4][ranks8]") {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto special = normal_values({8, 16}, 6);
  special.index_put_({0}, inf);
  special.index_put_({1}, -inf);
  special.index_put_({2}, nan);
  special.index_put_({3}, 0.0);
  const auto whole = small_whole_values({8, 16}, 7);
  struct Unary {
    const char* name;
    std::function<Array(const Array&)> op;
    std::function<at::Tensor(const at::Tensor&)> oracle;
  };
  const std::vector<Unary> on_whole{
      {"x == 1", [](const Array& x) { return x == 1.0; },
       [](const at::Tensor& t) { return t == 1.0; }},
      {"x != 1", [](const Array& x) { return x != 1.0; },
       [](const at::Tensor& t) { return t != 1.0; }},
      {"x < 1", [](const Array& x) { return x < 1.0; },
       [](const at::Tensor& t) { return t < 1.0; }},
      {"x <= 1", [](const Array& x) { return x <= 1.0; },
       [](const at::Tensor& t) { return t <= 1.0; }},
      {"x > 0.5", [](const Array& x) { return x > 0.5; },
       [](const at::Tensor& t) { return t > 0.5; }},
      {"x >= 2", [](const Array& x) { return x >= 2.0; },
       [](const at::Tensor& t) { return t >= 2.0; }},
      {"logical_not", [](const Array& x) { return nnx::logical_not(x); },
       [](const at::Tensor& t) { return torch::logical_not(t); }},
  };
  const std::vector<Unary> on_special{
      {"isfinite", [](const Array& x) { return nnx::isfinite(x); },
       [](const at::Tensor& t) { return torch::isfinite(t); }},
      {"isnan", [](const Array& x) { return nnx::isnan(x); },
       [](const at::Tensor& t) { return torch::isnan(t); }},
      {"x > 0", [](const Array& x) { return x > 0.0; },
       [](const at::Tensor& t) { return t > 0.0; }},
  };
  for (const auto& mesh : op_meshes()) {
    // Pending pieces of whole numbers need not sum to them exactly: ties on whole layouts only.
    for (const auto& in : layouts(whole, *mesh, {.tuples = true}, /*partial=*/false))
      for (const auto& u : on_whole) {
        INFO(u.name);
        check_unary(mesh, in, u.op, u.oracle);
      }
    for (const auto& in : layouts(special, *mesh, {.tuples = true}))
      for (const auto& u : on_special) {
        INFO(u.name);
        check_unary(mesh, in, u.op, u.oracle);
      }
  }
}

TEST_CASE("where picks exactly, with gradients to the side picked, on every layout",
          "[ranks2][ranks4][ranks8]") {
  const auto condition = integer_values({8, 16}, 2, 8).to(torch::kBool);
  const auto x = normal_values({8, 16}, 9), y = normal_values({8, 16}, 10);
  for (const auto& mesh : op_meshes()) {
    const auto xs = layouts(x, *mesh), ys = layouts(y, *mesh);
    const std::vector<In> some_y{ys.front(), ys.back()};  // replicated, and a pending sum
    const std::vector<In> some_x{xs.front(), xs.back()};
    for (const auto& sc : specs_for({8, 16}, *mesh, {.tuples = true})) {
      for (const auto& in_x : xs)
        for (const auto& in_y : some_y) check_where(mesh, {condition, sc}, in_x, in_y);
      for (const auto& in_y : ys)
        for (const auto& in_x : some_x) check_where(mesh, {condition, sc}, in_x, in_y);
    }
  }
}

TEST_CASE("where broadcasts its three operands on any layouts", "[ranks2][ranks4][ranks8]") {
  const auto x = normal_values({8, 16}, 11), y_row = normal_values({16}, 12);
  const auto column = integer_values({8, 1}, 2, 13).to(torch::kBool);
  const auto row_condition = integer_values({16}, 2, 14).to(torch::kBool);
  const auto x_column = normal_values({8, 1}, 15);
  for (const auto& mesh : op_meshes()) {
    for (const auto& sc : specs_for({8, 1}, *mesh))
      for (const auto& in_x : layouts(x, *mesh))
        for (const auto& sy : specs_for({16}, *mesh)) {
          check_where(mesh, {column, sc}, in_x, {y_row, sy});
          check_where(mesh, {column, sc}, {y_row, sy}, in_x);
        }
    // None of the three spans the whole [8, 16]: the output is larger than every operand.
    for (const auto& sc : specs_for({16}, *mesh))
      for (const auto& in_x : layouts(x_column, *mesh))
        for (const auto& sy : specs_for({16}, *mesh))
          check_where(mesh, {row_condition, sc}, in_x, {y_row, sy});
  }
}

TEST_CASE("where keeps -0.0, infinities and NaN bit for bit on every layout",
          "[ranks2][ranks4][ranks8]") {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto specials = torch::tensor({-0.0, 0.0, inf, -inf, nan, 1.5, -0.0, 0.0});
  const auto x = specials.repeat({8, 2});
  const auto y = specials.flip(0).repeat({8, 2});
  const auto condition = integer_values({8, 16}, 2, 16).to(torch::kBool);
  const auto want = torch::where(condition, x, y);
  for (const auto& mesh : op_meshes())
    for (const auto& sc : specs_for({8, 16}, *mesh))
      for (const auto& sx : specs_for({8, 16}, *mesh))
        for (const auto& sy : {replicated(2), sx, P(nnx::none, mesh->axis_names().back())}) {
          INFO(mesh->to_string() << " condition " << sc.to_string() << ", x " << sx.to_string()
                                 << ", y " << sy.to_string());
          const Array got = nnx::where(nnx::device_put(condition, {mesh, sc}),
                                       nnx::device_put(x, {mesh, sx}),
                                       nnx::device_put(y, {mesh, sy}));
          CHECK(torch::equal(bits(nnx::gather(got)), bits(want)));
        }
}

TEST_CASE("where promotes as LibTorch, takes any condition dtype and names bad shapes",
          "[ranks2][ranks4][ranks8]") {
  const auto ids = torch::arange(32, torch::kLong).reshape({4, 8});
  const auto flags = ids.remainder(3) == 0;
  std::vector<MeshPtr> meshes{nullptr};
  for (const auto& mesh : op_meshes()) meshes.push_back(mesh);
  for (const auto& mesh : meshes) {
    INFO((mesh ? mesh->to_string() : std::string("no mesh")));
    auto place = [&](const at::Tensor& t) {
      return mesh ? nnx::device_put(t, {mesh, P(nnx::none, mesh->axis_names().front())})
                  : Array(t);
    };
    const Array c = place(flags), i = place(ids);
    const Array whole = nnx::where(c, i, 2.0);  // a whole number keeps the integers
    CHECK(whole.dtype() == torch::kLong);
    CHECK(torch::equal(nnx::gather(whole), torch::where(flags, ids, 2)));
    const Array half = nnx::where(c, 0.5, i);
    CHECK(half.dtype() == torch::kFloat);
    CHECK(torch::equal(nnx::gather(half), torch::where(flags, 0.5, ids.to(torch::kFloat))));
    const Array wide = nnx::where(c, place(ids.to(torch::kFloat)), place(ids.to(torch::kDouble)));
    CHECK(wide.dtype() == torch::kDouble);
    // A numeric condition holds where nonzero, as jnp.where's.
    const Array numeric = nnx::where(i, i, -1.0);
    CHECK(torch::equal(nnx::gather(numeric), torch::where(ids != 0, ids, -1)));
    const Array mixed = nnx::where(place(flags), place(ids) * 2.0, place(ids));
    CHECK(torch::equal(nnx::gather(mixed), torch::where(flags, ids * 2, ids)));
    CHECK(nnx::gather(nnx::logical_not(c)).equal(~flags));
    // An empty dim stays empty, broadcast against 1 or not.
    const Array empty = place(torch::zeros({0, 8}));
    const Array picked = nnx::where(place(torch::zeros({0, 8}, torch::kBool)), empty, 1.0);
    CHECK(picked.shape() == nnx::Shape{0, 8});
    CHECK(nnx::gather(picked).sizes() == at::IntArrayRef{0, 8});
    CHECK((empty + place(torch::ones({1, 8}))).shape() == nnx::Shape{0, 8});
  }
  const Array c(torch::ones({8, 16}, torch::kBool));
  CHECK_THROWS_WITH(nnx::where(c, Array(torch::zeros({7})), 0.0),
                    Catch::Matchers::Contains("[where] shapes (8, 16) and (7,) do not broadcast"));
  CHECK_THROWS_WITH(nnx::less(Array(torch::zeros({3, 2})), Array(torch::zeros({4}))),
                    Catch::Matchers::Contains("[less] shapes (3, 2) and (4,) do not broadcast"));
}
