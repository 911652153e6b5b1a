// Elementwise ops, reductions, softmax, dropout and with_sharding_constraint on every test mesh
// and layout: values and gradients equal LibTorch autograd on the whole tensors, no fallback.
#include <torch/csrc/autograd/autograd.h>

#include "../catch_after_torch.h"

#include "ops_test_util.h"

#include <limits>

using namespace nnx_test;
using nnx::Array;
using nnx::P;

namespace {

struct Binary {
  const char* name;
  std::function<Array(const Array&, const Array&)> op;
  std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> oracle;
};

const std::vector<Binary>& binaries() {
  static const std::vector<Binary> ops{
      {"add", [](const Array& a, const Array& b) { return nnx::add(a, b); },
       [](const at::Tensor& a, const at::Tensor& b) { return a + b; }},
      {"sub", [](const Array& a, const Array& b) { return nnx::sub(a, b); },
       [](const at::Tensor& a, const at::Tensor& b) { return a - b; }},
      {"mul", [](const Array& a, const Array& b) { return nnx::mul(a, b); },
       [](const at::Tensor& a, const at::Tensor& b) { return a * b; }},
      {"div", [](const Array& a, const Array& b) { return nnx::div(a, b); },
       [](const at::Tensor& a, const at::Tensor& b) { return a / b; }},
      {"maximum", [](const Array& a, const Array& b) { return nnx::maximum(a, b); },
       [](const at::Tensor& a, const at::Tensor& b) { return torch::maximum(a, b); }},
      {"minimum", [](const Array& a, const Array& b) { return nnx::minimum(a, b); },
       [](const at::Tensor& a, const at::Tensor& b) { return torch::minimum(a, b); }},
  };
  return ops;
}

// Every binary op on a and b (b divides, so it must be nonzero); `skip_commutative` leaves out
// add, mul, maximum and minimum (for the swapped order of a pair already checked).
void check_binaries(const MeshPtr& mesh, const In& a, const In& b, bool skip_commutative = false) {
  for (const auto& f : binaries()) {
    const std::string name = f.name;
    if (skip_commutative &&
        (name == "add" || name == "mul" || name == "maximum" || name == "minimum"))
      continue;
    INFO(name);
    check_binary(mesh, a, b, f.op, f.oracle);
  }
}

struct Unary {
  const char* name;
  std::function<Array(const Array&)> op;
  std::function<at::Tensor(const at::Tensor&)> oracle;
  bool positive_input = false;  // log and rsqrt
};

const std::vector<Unary>& unaries() {
  static const std::vector<Unary> ops{
      {"neg", [](const Array& a) { return nnx::neg(a); }, [](const at::Tensor& t) { return -t; }},
      {"exp", [](const Array& a) { return nnx::exp(a); },
       [](const at::Tensor& t) { return torch::exp(t); }},
      {"log", [](const Array& a) { return nnx::log(a); },
       [](const at::Tensor& t) { return torch::log(t); }, true},
      {"tanh", [](const Array& a) { return nnx::tanh(a); },
       [](const at::Tensor& t) { return torch::tanh(t); }},
      {"relu", [](const Array& a) { return nnx::relu(a); },
       [](const at::Tensor& t) { return torch::relu(t); }},
      {"gelu (tanh, as jax.nn.gelu's default)", [](const Array& a) { return nnx::gelu(a); },
       [](const at::Tensor& t) { return torch::gelu(t, "tanh"); }},
      {"gelu(exact)", [](const Array& a) { return nnx::gelu(a, false); },
       [](const at::Tensor& t) { return torch::gelu(t, "none"); }},
      {"silu", [](const Array& a) { return nnx::silu(a); },
       [](const at::Tensor& t) { return torch::silu(t); }},
      {"sigmoid", [](const Array& a) { return nnx::sigmoid(a); },
       [](const at::Tensor& t) { return torch::sigmoid(t); }},
      {"square", [](const Array& a) { return nnx::square(a); },
       [](const at::Tensor& t) { return torch::square(t); }},
      {"rsqrt", [](const Array& a) { return nnx::rsqrt(a); },
       [](const at::Tensor& t) { return torch::rsqrt(t); }, true},
      {"power(3)", [](const Array& a) { return nnx::power(a, 3); },
       [](const at::Tensor& t) { return torch::pow(t, 3); }},
      {"power(-1.5)", [](const Array& a) { return nnx::power(a, -1.5); },
       [](const at::Tensor& t) { return torch::pow(t, -1.5); }, true},
      {"sqrt", [](const Array& a) { return nnx::sqrt(a); },
       [](const at::Tensor& t) { return torch::sqrt(t); }, true},
      {"abs", [](const Array& a) { return nnx::abs(a); },
       [](const at::Tensor& t) { return torch::abs(t); }},
      {"sin", [](const Array& a) { return nnx::sin(a); },
       [](const at::Tensor& t) { return torch::sin(t); }},
      {"cos", [](const Array& a) { return nnx::cos(a); },
       [](const at::Tensor& t) { return torch::cos(t); }},
      {"softplus", [](const Array& a) { return nnx::softplus(a); },
       [](const at::Tensor& t) { return torch::log1p(torch::exp(t)); }},
      {"log_sigmoid", [](const Array& a) { return nnx::log_sigmoid(a); },
       [](const at::Tensor& t) { return torch::log(torch::sigmoid(t)); }},
      {"clip(-0.5, 0.7)", [](const Array& a) { return nnx::clip(a, -0.5, 0.7); },
       [](const at::Tensor& t) {
         return torch::where(t < -0.5, -0.5, torch::where(t > 0.7, 0.7, t));
       }},
      {"clip(max 0.2)", [](const Array& a) { return nnx::clip(a, std::nullopt, 0.2); },
       [](const at::Tensor& t) { return torch::where(t > 0.2, 0.2, t); }},
  };
  return ops;
}

// Scalar operands and the operators: each must act once on the whole value.
const std::vector<Unary>& scalar_ops() {
  static const std::vector<Unary> ops{
      {"x + 1.5", [](const Array& a) { return a + 1.5; },
       [](const at::Tensor& t) { return t + 1.5; }},
      {"x - 2", [](const Array& a) { return a - 2.0; },
       [](const at::Tensor& t) { return t - 2.0; }},
      {"x * -3", [](const Array& a) { return a * -3.0; },
       [](const at::Tensor& t) { return t * -3.0; }},
      {"2.5 * x", [](const Array& a) { return 2.5 * a; },
       [](const at::Tensor& t) { return 2.5 * t; }},
      {"x / 4", [](const Array& a) { return a / 4.0; },
       [](const at::Tensor& t) { return t / 4.0; }},
      {"-x", [](const Array& a) { return -a; }, [](const at::Tensor& t) { return -t; }},
      {"add(x, 0.5)", [](const Array& a) { return nnx::add(a, 0.5); },
       [](const at::Tensor& t) { return t + 0.5; }},
      {"mul(x, 2) + 1", [](const Array& a) { return nnx::mul(a, 2.0) + 1.0; },
       [](const at::Tensor& t) { return t * 2.0 + 1.0; }},
  };
  return ops;
}

// Each op on each layout (ops marked positive_input on the positive layouts).
void check_unaries(const MeshPtr& mesh, const std::vector<Unary>& ops,
                   const std::vector<In>& normal_layouts, const std::vector<In>& positive_layouts) {
  for (const auto& u : ops) {
    INFO(u.name);
    for (const auto& x : u.positive_input ? positive_layouts : normal_layouts)
      check_unary(mesh, x, u.op, u.oracle);
  }
}

// A reduction: dims (empty: all) and keepdim.
struct Reduction {
  std::vector<int64_t> dims;
  bool keepdim = false;
};

std::string reduction_name(const char* name, const Reduction& r) {
  return fmt::format("{}(dims=({}), keepdim={})", name, fmt::join(r.dims, ", "), r.keepdim);
}

void check_sum_and_mean(const MeshPtr& mesh, const In& x, const std::vector<Reduction>& cases) {
  for (const auto& r : cases) {
    {
      INFO(reduction_name("sum", r));
      check_unary(
          mesh, x, [&](const Array& a) { return nnx::sum(a, r.dims, r.keepdim); },
          [&](const at::Tensor& t) {
            return r.dims.empty() ? t.sum() : t.sum(at::IntArrayRef(r.dims), r.keepdim);
          });
    }
    INFO(reduction_name("mean", r));
    check_unary(
        mesh, x, [&](const Array& a) { return nnx::mean(a, r.dims, r.keepdim); },
        [&](const at::Tensor& t) {
          return r.dims.empty() ? t.mean() : t.mean(at::IntArrayRef(r.dims), r.keepdim);
        });
  }
}

}  // namespace

TEST_CASE("add, sub, mul and div of same-shape arrays are exact on every pair of layouts",
          "[ranks2][ranks4][ranks8]") {
  const auto a = normal_values({8, 16}, 1), b = nonzero_values({8, 16}, 2);
  for (const auto& mesh : op_meshes())
    for (const auto& [sa, sb] : spec_pairs({8, 16}, {8, 16}, *mesh))
      check_binaries(mesh, {a, sa}, {b, sb});
}

TEST_CASE("elementwise ops broadcast [16], [8, 1] and [1, 16] against [8, 16] on any layouts",
          "[ranks2][ranks4][ranks8]") {
  const auto a = nonzero_values({8, 16}, 3);
  for (const nnx::Shape& shape : {nnx::Shape{16}, nnx::Shape{8, 1}, nnx::Shape{1, 16}}) {
    const auto b = nonzero_values(shape, 4);
    for (const auto& mesh : op_meshes())
      for (const auto& sa : specs_for({8, 16}, *mesh))
        for (const auto& sb : specs_for(shape, *mesh)) {
          check_binaries(mesh, {a, sa}, {b, sb});
          check_binaries(mesh, {b, sb}, {a, sa}, /*skip_commutative=*/true);
        }
  }
}

TEST_CASE("elementwise ops resolve a pending-sum operand on either side or both",
          "[ranks2][ranks4][ranks8]") {
  const auto a = normal_values({8, 16}, 5), b = nonzero_values({8, 16}, 6);
  const auto row = nonzero_values({16}, 7);
  for (const auto& mesh : op_meshes()) {
    const auto pending_a = pending_sum_layouts(a, *mesh);
    const auto pending_b = pending_sum_layouts(b, *mesh);
    for (const auto& pa : pending_a)
      for (const auto& sb : specs_for({8, 16}, *mesh)) check_binaries(mesh, pa, {b, sb});
    for (const auto& pb : pending_b)
      for (const auto& sa : specs_for({8, 16}, *mesh)) check_binaries(mesh, {a, sa}, pb);
    for (const auto& pa : pending_a)
      for (const auto& pb : pending_b) check_binaries(mesh, pa, pb);
    // Broadcast against a pending sum, and a pending-sum row broadcast against a matrix.
    for (const auto& pa : pending_a)
      for (const auto& sr : specs_for({16}, *mesh)) check_binaries(mesh, pa, {row, sr});
    for (const auto& pr : pending_sum_layouts(row, *mesh))
      for (const auto& sb : specs_for({8, 16}, *mesh)) check_binaries(mesh, {b, sb}, pr);
  }
}

TEST_CASE("a pending sum plus a mask of -inf equals the one-device sum and softmax",
          "[ranks2][ranks4][ranks8]") {
  // A row-parallel product's pending sum plus a causal mask: the mask's -inf taken into the
  // pending layout used to become NaN on every coordinate but the first (-inf * 0).
  const auto a = normal_values({8, 16}, 12);
  const double inf = std::numeric_limits<double>::infinity();
  const auto upper = torch::ones({8, 16}, torch::kBool).triu(1);
  const auto mask = torch::zeros({8, 16}, torch::kDouble).masked_fill(upper, -inf);
  auto masked_softmax = [](const Array& x, const Array& m) { return nnx::softmax(x + m, -1); };
  auto oracle = [](const at::Tensor& x, const at::Tensor& m) { return torch::softmax(x + m, -1); };
  for (const auto& mesh : op_meshes())
    for (const auto& pa : pending_sum_layouts(a, *mesh))
      for (const auto& sm : specs_for({8, 16}, *mesh)) {
        check_binary(mesh, pa, {mask, sm}, [](const Array& x, const Array& m) { return x + m; },
                     [](const at::Tensor& x, const at::Tensor& m) { return x + m; });
        // Values only: which layout the sum takes, and so softmax's gathers, the rules decide.
        const Checked softmax =
            check_binary(mesh, pa, {mask, sm}, masked_softmax, oracle, {.promised = false});
        CHECK_FALSE(softmax.whole.isnan().any().item<bool>());
      }
}

TEST_CASE("astype of a pending sum to integers or bool casts the sum, not its pieces",
          "[ranks2][ranks4][ranks8]") {
  // Each piece below 1, their sum above: truncating the pieces gave 0.
  const auto whole = torch::full({4, 6}, 1.25);
  for (const auto& mesh : op_meshes())
    for (const auto& pending : pending_sum_layouts(whole, *mesh)) {
      INFO(pending.spec.to_string() << " pending over " << pending.partial.size() << " axes");
      const Array x = place(mesh, pending).array;
      CHECK(torch::equal(nnx::gather(nnx::astype(x, at::kLong)), torch::ones({4, 6}, at::kLong)));
      CHECK(torch::equal(nnx::gather(nnx::astype(x, at::kBool)), torch::ones({4, 6}, at::kBool)));
      const Array half = nnx::astype(x, at::kDouble);  // floating casts keep the sum pending
      CHECK(half.partial_axes() == pending.partial);
      CHECK(torch::allclose(nnx::gather(half), whole.to(at::kDouble)));
    }
}

TEST_CASE("scalar operands and operators act once on the whole value, pending sums included",
          "[ranks2][ranks4][ranks8]") {
  const auto a = normal_values({8, 16}, 8), b = nonzero_values({8, 16}, 9);
  for (const auto& mesh : op_meshes()) {
    const auto xs = layouts(a, *mesh, {.tuples = true});
    check_unaries(mesh, scalar_ops(), xs, xs);
    INFO("(a + b) * a - b / 2 + a / b");
    for (const auto& pa : layouts(a, *mesh))
      for (const auto& pb : layouts(b, *mesh))
        check_binary(
            mesh, pa, pb,
            [](const Array& x, const Array& y) { return (x + y) * x - y / 2.0 + x / y; },
            [](const at::Tensor& x, const at::Tensor& y) { return (x + y) * x - y / 2.0 + x / y; });
  }
}

TEST_CASE("unary ops are exact on every layout, pending sums included",
          "[ranks2][ranks4][ranks8]") {
  const auto normal = normal_values({8, 16}, 10), positive = positive_values({8, 16}, 11);
  for (const auto& mesh : op_meshes())
    check_unaries(mesh, unaries(), layouts(normal, *mesh, {.tuples = true}),
                  layouts(positive, *mesh, {.tuples = true}));
}

TEST_CASE("sum and mean over sharded and unsharded dims, with and without keepdim, are exact",
          "[ranks2][ranks4][ranks8]") {
  const std::vector<Reduction> matrix_cases{{{0}, false},   {{0}, true},   {{1}, false},
                                            {{1}, true},    {{-1}, false}, {{0, 1}, false},
                                            {{0, 1}, true}, {{}, false}};
  const std::vector<Reduction> cube_cases{{{0, 2}, false}, {{1}, false}, {{-1}, true}, {{}, false}};
  const auto x = normal_values({8, 16}, 12), cube = normal_values({4, 8, 16}, 13);
  for (const auto& mesh : op_meshes()) {
    for (const auto& in : layouts(x, *mesh)) check_sum_and_mean(mesh, in, matrix_cases);
    for (const auto& in : layouts(x, *mesh, {.tuples = true}))
      if (has_tuple(in.spec)) check_sum_and_mean(mesh, in, {{{0}, false}, {{}, false}});
    for (const auto& in : layouts(cube, *mesh)) check_sum_and_mean(mesh, in, cube_cases);
  }
}

TEST_CASE("sum over a sharded dim leaves a pending sum without communication",
          "[ranks2][ranks4][ranks8]") {
  const auto& mesh = op_meshes().front();  // {n} named "x"
  const auto x = normal_values({8, 16}, 14);
  auto counts = nnx::RedistributeCounts{};
  auto sum_counted = [&](std::vector<int64_t> dims) {
    return [&counts, dims](const Array& a) {
      nnx::redistribute_counts() = {};
      auto y = nnx::sum(a, dims);
      counts = nnx::redistribute_counts();
      return y;
    };
  };
  auto rows = check_unary(mesh, {x, P("x", nnx::none)}, sum_counted({0}),
                          [](const at::Tensor& t) { return t.sum(0); });
  CHECK(counts.collectives() == 0);
  CHECK(rows.out.partial_axes() == std::vector<std::string>{"x"});
  auto total = check_unary(mesh, {x, P(nnx::none, "x")}, sum_counted({}),
                           [](const at::Tensor& t) { return t.sum(); });
  CHECK(counts.collectives() == 0);
  CHECK(total.out.shape() == nnx::Shape{});
  CHECK(total.out.partial_axes() == std::vector<std::string>{"x"});
  auto kept = check_unary(mesh, {x, P("x", nnx::none)}, sum_counted({1}),
                          [](const at::Tensor& t) { return t.sum(1); });
  CHECK(counts.collectives() == 0);
  CHECK(kept.out.spec() == P("x"));
  CHECK(kept.out.partial_axes().empty());
}

TEST_CASE("max, min, argmax and argmin over a sharded or unsharded dim are exact",
          "[ranks2][ranks4][ranks8]") {
  const auto x = normal_values({8, 16}, 15);
  // Whole numbers 0-2 as doubles: ties everywhere, where max and min split the gradient.
  const auto tied = integer_values({8, 16}, 3, 16).to(torch::kDouble);
  struct Reduce {
    const char* name;
    Array (*op)(const Array&, int64_t, bool);
    at::Tensor (*oracle)(const at::Tensor&, int64_t, bool);
  };
  const Reduce reductions[] = {
      {"max", nnx::max, [](const at::Tensor& t, int64_t d, bool k) { return t.amax(d, k); }},
      {"min", nnx::min, [](const at::Tensor& t, int64_t d, bool k) { return t.amin(d, k); }},
      {"argmax", nnx::argmax,
       [](const at::Tensor& t, int64_t d, bool k) { return t.argmax(d, k); }},
      {"argmin", nnx::argmin,
       [](const at::Tensor& t, int64_t d, bool k) { return t.argmin(d, k); }},
  };
  for (const auto& mesh : op_meshes())
    for (const auto& values : {x, tied})
      for (const auto& in : layouts(values, *mesh, {.tuples = true}, /*partial=*/false))
        for (int64_t dim : {0, 1, -1})
          for (bool keepdim : {false, true})
            for (const auto& r : reductions) {
              INFO(r.name << "(dim=" << dim << ", keepdim=" << keepdim << ")");
              check_unary(
                  mesh, in, [&](const Array& a) { return r.op(a, dim, keepdim); },
                  [&](const at::Tensor& t) { return r.oracle(t, dim, keepdim); },
                  {.gathers = sharded_dim(in, dim)});
            }
  // Pending sums resolve first (values without ties: the pieces' sum is exact only so far).
  for (const auto& mesh : op_meshes())
    for (const auto& in : pending_sum_layouts(x, *mesh))
      for (const auto& r : reductions) {
        INFO(r.name << " of a pending sum");
        check_unary(
            mesh, in, [&](const Array& a) { return r.op(a, 1, false); },
            [&](const at::Tensor& t) { return r.oracle(t, 1, false); },
            {.gathers = sharded_dim(in, 1)});
      }
}

TEST_CASE("max and min split the gradient among ties and argmax finds the first NaN, as JAX") {
  // jax.grad(lambda v: jnp.max(v))([1, 1, 0]) is [0.5, 0.5, 0]; jnp.argmax([1, nan, 3, nan]) is 1.
  const auto v = torch::tensor({1.0, 1.0, 0.0}, torch::kDouble).requires_grad_();
  nnx::max(Array(v), 0).local().backward();
  CHECK(torch::equal(v.grad(), torch::tensor({0.5, 0.5, 0.0}, torch::kDouble)));
  const auto w = torch::tensor({0.0, 2.0, 0.0, 0.0}, torch::kDouble).requires_grad_();
  nnx::min(Array(w), 0).local().backward();
  CHECK(torch::allclose(w.grad(), torch::tensor({1.0, 0.0, 1.0, 1.0}, torch::kDouble) / 3.0));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Array rows(torch::tensor({{1.0, nan, 3.0, nan}, {2.0, 2.0, 1.0, 1.0}}));
  CHECK(torch::equal(nnx::argmax(rows, 1).local(), torch::tensor({1, 0})));
  CHECK(torch::equal(nnx::argmin(rows, 1).local(), torch::tensor({1, 2})));
  CHECK(std::isnan(nnx::max(rows, 1).local()[0].item<double>()));
  CHECK(nnx::argmax(rows, 1, true).dtype() == torch::kLong);
}

TEST_CASE("abs, clip, maximum and minimum take JAX's gradient at their kinks, where LibTorch's "
          "differs") {
  // jax.grad(lambda v: jnp.sum(jnp.abs(v)))([0, -0, nan, -1, inf, -inf]) is [1, 1, -1, -1, 1, -1]
  // (LibTorch's sign gives 0 at 0 and NaN), and the value keeps |-0| = +0.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const auto v = torch::tensor({0.0, -0.0, nan, -1.0, inf, -inf}, torch::kDouble).requires_grad_();
  const at::Tensor magnitude = nnx::abs(Array(v)).local();
  CHECK_FALSE(std::signbit(magnitude[1].item<double>()));
  magnitude.sum().backward();
  CHECK(torch::equal(v.grad(), torch::tensor({1.0, 1.0, -1.0, -1.0, 1.0, -1.0}, torch::kDouble)));
  // jnp.clip(v, -0.5, 0.5) is maximum then minimum: half the gradient on a bound, 1 inside,
  // 0 outside and at NaN (LibTorch's clamp with scalar bounds gives 0 on a bound, with tensor
  // bounds 1 at NaN); one-sided alike; a quarter where both bounds and x are equal.
  const auto w = torch::tensor({-0.5, 0.5, 0.0, -1.0, 1.0, nan}).requires_grad_();
  nnx::clip(Array(w), -0.5, 0.5).local().sum().backward();
  CHECK(torch::equal(w.grad(), torch::tensor({0.5, 0.5, 1.0, 0.0, 0.0, 0.0})));
  const auto t = torch::tensor({0.5, 0.25}, torch::kDouble).requires_grad_();
  nnx::clip(Array(t), 0.5, 0.5).local().sum().backward();
  CHECK(torch::equal(t.grad(), torch::tensor({0.25, 0.0}, torch::kDouble)));
  const auto u = torch::tensor({0.25, 0.5, 0.0}).requires_grad_();
  nnx::clip(Array(u), 0.25).local().sum().backward();
  CHECK(torch::equal(u.grad(), torch::tensor({0.5, 1.0, 0.0})));
  // Without gradients, abs is LibTorch's own, integers included.
  CHECK(torch::equal(nnx::abs(Array(torch::tensor({-3, 0, 2}))).local(), torch::tensor({3, 0, 2})));
  // jax.grad of jnp.sum(jnp.maximum(x, y)) (and minimum), y broadcast over x's rows: half on a
  // tie (-0 and 0 tie), nothing to either operand where one is NaN (LibTorch passes all of it to
  // both there), and y's shares summed over the rows.
  for (const bool maximum : {true, false}) {
    INFO((maximum ? "maximum" : "minimum"));
    const auto x = torch::tensor({nan, 1.0, 2.0, 0.0, -0.0, 5.0}).reshape({2, 3}).requires_grad_();
    const auto y = torch::tensor({1.0, 0.0, nan}).requires_grad_();
    const Array out = maximum ? nnx::maximum(Array(x), Array(y)) : nnx::minimum(Array(x), Array(y));
    CHECK(torch::equal(out.local().isnan(), torch::tensor({true, false, true, false, false, true})
                                                .reshape({2, 3})));
    out.local().sum().backward();
    const auto x_grad = maximum ? torch::tensor({0.0, 1.0, 0.0, 0.0, 0.5, 0.0})
                                : torch::tensor({0.0, 0.0, 0.0, 1.0, 0.5, 0.0});
    CHECK(torch::equal(x.grad(), x_grad.to(torch::kFloat).reshape({2, 3})));
    const auto y_grad = maximum ? torch::tensor({1.0, 0.5, 0.0}) : torch::tensor({0.0, 1.5, 0.0});
    CHECK(torch::equal(y.grad(), y_grad.to(torch::kFloat)));
  }
  // Only one operand differentiated, and integers without gradients: LibTorch's own values.
  const auto z = torch::tensor({1.0, -2.0}, torch::kDouble).requires_grad_();
  nnx::minimum(Array(z), Array(torch::tensor({1.0, 0.0}, torch::kDouble))).local().sum().backward();
  CHECK(torch::equal(z.grad(), torch::tensor({0.5, 1.0}, torch::kDouble)));
  const Array larger = nnx::maximum(Array(torch::tensor({-3, 4})), Array(torch::tensor({2, 2})));
  CHECK(torch::equal(larger.local(), torch::tensor({2, 4})));
}

TEST_CASE("the exact gelu and silu give the values, gradients and second derivatives of JAX's "
          "formulas differentiated by LibTorch, bit for bit, in every floating dtype") {
  // The formulas as LibTorch's autograd runs them, op by op.
  struct Formula {
    const char* name;
    std::function<Array(const Array&)> op;
    std::function<at::Tensor(const at::Tensor&)> composite;
  };
  const std::vector<Formula> formulas{
      {"gelu(exact)", [](const Array& a) { return nnx::gelu(a, false); },
       [](const at::Tensor& x) { return 0.5 * x * torch::erfc(x * (-std::sqrt(2.0) / 2)); }},
      {"silu", [](const Array& a) { return nnx::silu(a); },
       [](const at::Tensor& x) { return x * x.sigmoid(); }}};
  // One chunk; several, the last one short; and a transposed (strided) input. LibTorch's vector
  // loops compute the last elements of a thread's range (under 32 floats) with the scalar
  // function, which for sigmoid rounds otherwise: these sizes split into multiples of 32 over 1,
  // 2, 4, 8 or 16 threads, so that the composite has no such tail before the end.
  const auto small = normal_values({64}, 17) * 3, large = normal_values({320, 1000}, 19) * 3;
  for (const auto& f : formulas)
    for (const auto& whole : {small, large, large.t()})
      for (const auto dtype : {torch::kFloat, torch::kDouble, torch::kBFloat16, torch::kHalf}) {
        INFO(f.name << " " << nnx::dtype_name(dtype) << " " << whole.sizes());
        const auto values = whole.to(dtype);
        const auto x = values.clone().requires_grad_(), x_ref = values.clone().requires_grad_();
        const auto y = f.op(Array(x)).local(), y_ref = f.composite(x_ref);
        CHECK(torch::equal(y, y_ref));
        CHECK(y.grad_fn()->next_edges().size() == 1);  // one node, keeping x alone
        const auto cotangent = positive_values(whole.sizes().vec(), 18).to(dtype);
        const auto g_ref = torch::autograd::grad({y_ref}, {x_ref}, {cotangent}, true, true)[0];
        // A first derivative alone (the node's own loop), then one to differentiate again.
        CHECK(torch::equal(torch::autograd::grad({y}, {x}, {cotangent}, true)[0], g_ref));
        const auto g = torch::autograd::grad({y}, {x}, {cotangent}, true, true)[0];
        CHECK(torch::equal(g, g_ref));
        // The backward pass is differentiable, to the formula's second derivative.
        const auto h = torch::autograd::grad({g.sum()}, {x})[0];
        CHECK(torch::equal(h, torch::autograd::grad({g_ref.sum()}, {x_ref})[0]));
      }
  // Without autograd: the same values, and integers in float32.
  const auto ints = torch::tensor({-3, 0, 2});
  for (const auto& f : formulas) {
    INFO(f.name);
    CHECK(torch::equal(f.op(Array(ints)).local(), f.composite(ints.to(torch::kFloat))));
    CHECK(torch::equal(f.op(Array(large)).local(), f.composite(large)));
  }
}

TEST_CASE("softmax and log_softmax over sharded and unsharded dims are exact",
          "[ranks2][ranks4][ranks8]") {
  const auto x = normal_values({8, 16}, 16) * 3;
  for (const auto& mesh : op_meshes())
    for (const auto& in : layouts(x, *mesh, {.tuples = true}))
      for (int64_t dim : {0, 1, -1}) {
        INFO("dim " << dim);
        check_unary(
            mesh, in, [&](const Array& a) { return nnx::softmax(a, dim); },
            [&](const at::Tensor& t) { return torch::softmax(t, dim); },
            {.gathers = sharded_dim(in, dim)});
        check_unary(
            mesh, in, [&](const Array& a) { return nnx::log_softmax(a, dim); },
            [&](const at::Tensor& t) { return torch::log_softmax(t, dim); },
            {.gathers = sharded_dim(in, dim)});
      }
}

TEST_CASE("dropout draws the same mask on every mesh and scales the kept values",
          "[ranks2][ranks4][ranks8]") {
  const double rate = 0.25;
  const auto key = nnx::random::fold_in(nnx::random::key(1234), 3);
  for (const nnx::Shape& shape : {nnx::Shape{8, 16}, nnx::Shape{4, 8, 16}}) {
    const auto x = normal_values(shape, 17);
    const auto mask = nnx::random::bernoulli(key, 1 - rate, shape).to(torch::kDouble);
    const double kept = mask.sum().item<double>();
    CHECK(kept > 0);
    CHECK(kept < static_cast<double>(mask.numel()));
    // Scaled by the reciprocal of the keep rate, as XLA computes Flax's inputs / keep_prob.
    const auto expected = x * mask * (1 / (1 - rate));
    // The one-device reference: a plain Array with the same key.
    const auto single = nnx::dropout(Array(x), rate, key).local();
    CHECK(torch::equal(single, expected));
    CHECK_FALSE(torch::equal(nnx::dropout(Array(x), rate, nnx::random::key(99)).local(), single));
    for (const auto& mesh : op_meshes()) {
      // The one-device dropout on the mesh's device (within an ulp: a GPU's kernels may round
      // otherwise).
      const auto single_here = nnx::dropout(Array(x.to(mesh->device())), rate, key).local().cpu();
      CHECK(torch::allclose(single_here, single, 1e-15, 0));
      for (const auto& in : layouts(x, *mesh, {.tuples = true, .max_sharded_dims = 2})) {
        auto result = check_unary(
            mesh, in, [&](const Array& a) { return nnx::dropout(a, rate, key); },
            [&](const at::Tensor& t) { return t * mask / (1 - rate); });
        INFO(describe(mesh, {in}) << " against the one-device dropout");
        if (in.partial.empty())
          CHECK((result.whole.defined() && torch::equal(result.whole.cpu(), single_here)));
        else
          CHECK((result.whole.defined() &&
                 torch::allclose(result.whole.cpu(), single_here, 1e-10, 1e-12)));
      }
    }
  }
}

TEST_CASE("with_sharding_constraint keeps the value and lays it out as asked",
          "[ranks2][ranks4][ranks8]") {
  const auto x = normal_values({8, 16}, 18);
  for (const auto& mesh : op_meshes())
    for (const auto& from : layouts(x, *mesh))
      for (const auto& to : specs_for({8, 16}, *mesh, {.tuples = true})) {
        INFO("to " << to.to_string());
        auto result = check_unary(
            mesh, from, [&](const Array& a) { return nnx::with_sharding_constraint(a, to); },
            [](const at::Tensor& t) { return t * 1; });
        if (!result.out.defined()) continue;
        CHECK(result.out.spec() == to);
        CHECK(result.out.partial_axes().empty());
        CHECK(torch::equal(result.out.local().detach(), block_of(result.whole, result.out)));
      }
  // A short spec is padded with none.
  const auto& mesh = op_meshes().front();
  auto y = nnx::with_sharding_constraint(nnx::device_put(x, {mesh, P()}), P("x"));
  CHECK(y.spec() == P("x", nnx::none));
  CHECK(torch::equal(nnx::gather(y).cpu(), x));
}

TEST_CASE("elementwise ops, reductions, softmax and dropout without a mesh equal LibTorch") {
  const MeshPtr none;
  const auto a = nonzero_values({8, 16}, 20), positive = positive_values({8, 16}, 21);
  for (const nnx::Shape& shape :
       {nnx::Shape{8, 16}, nnx::Shape{16}, nnx::Shape{8, 1}, nnx::Shape{1, 16}}) {
    const auto b = nonzero_values(shape, 22);
    check_binaries(none, {a}, {b});
    check_binaries(none, {b}, {a}, /*skip_commutative=*/true);
  }
  check_unaries(none, unaries(), {{a}}, {{positive}});
  check_unaries(none, scalar_ops(), {{a}}, {{a}});
  check_sum_and_mean(none, {a},
                     {{{0}, false}, {{1}, true}, {{-1}, false}, {{0, 1}, true}, {{}, false}});
  for (int64_t dim : {0, -1}) {
    INFO("dim " << dim);
    check_unary(
        none, {a}, [&](const Array& x) { return nnx::max(x, dim, dim == 0); },
        [&](const at::Tensor& t) { return std::get<0>(t.max(dim, dim == 0)); });
    check_unary(
        none, {a}, [&](const Array& x) { return nnx::softmax(x, dim); },
        [&](const at::Tensor& t) { return torch::softmax(t, dim); });
    check_unary(
        none, {a}, [&](const Array& x) { return nnx::log_softmax(x, dim); },
        [&](const at::Tensor& t) { return torch::log_softmax(t, dim); });
  }
  const auto key = nnx::random::key(5);
  const auto mask = nnx::random::bernoulli(key, 0.5, {8, 16}).to(torch::kDouble);
  check_unary(
      none, {a}, [&](const Array& x) { return nnx::dropout(x, 0.5, key); },
      [&](const at::Tensor& t) { return t * mask / 0.5; });
  CHECK_THROWS_WITH(nnx::clip(Array(a), 1.0, -1.0),
                    Catch::Matchers::Contains("[clip] min 1 is above max -1"));
}

TEST_CASE("clip keeps integer arrays integer; softplus and log_sigmoid take any dtype, as JAX; "
          "maximum splits a tie") {
  const Array ints(torch::arange(8));
  const Array clipped = nnx::clip(ints, 2, 5);
  CHECK(clipped.dtype() == torch::kLong);
  CHECK(torch::equal(clipped.local(), torch::tensor({2, 2, 2, 3, 4, 5, 5, 5})));
  CHECK(nnx::clip(ints, 0.5).dtype() == torch::kFloat);  // a fractional bound promotes
  CHECK(nnx::softplus(ints).dtype() == torch::kFloat);
  // log(sigmoid(x)) = -log1p(e^-x) for x >= 0.
  CHECK(torch::allclose(nnx::log_sigmoid(ints).local(),
                        -torch::log1p(torch::exp(-torch::arange(8, torch::kFloat)))));
  // softplus(25) in float64 is 25 + log1p(e^-25), not 25 (LibTorch's softplus cuts off at 20),
  // and its gradient sigmoid(25).
  const auto x = torch::full({}, 25.0, torch::kDouble).requires_grad_();
  const at::Tensor y = nnx::softplus(Array(x)).local();
  CHECK(y.item<double>() == 25.0 + std::log1p(std::exp(-25.0)));
  y.backward();
  CHECK(x.grad().item<double>() == Approx(1.0 / (1.0 + std::exp(-25.0))).epsilon(1e-15));
  CHECK(x.grad().item<double>() < 1.0);
  // maximum splits the gradient at a tie, as JAX does.
  const auto p = torch::tensor({1.0, 2.0}).requires_grad_();
  const auto q = torch::tensor({1.0, 3.0}).requires_grad_();
  nnx::maximum(Array(p), Array(q)).local().sum().backward();
  CHECK(torch::equal(p.grad(), torch::tensor({0.5, 0.0})));
  CHECK(torch::equal(q.grad(), torch::tensor({0.5, 1.0})));
}

TEST_CASE("a fractional scalar promotes integer and bool arrays to float instead of truncating",
          "[ranks2][ranks4][ranks8]") {
  const auto ids = torch::arange(8, torch::kLong).reshape({2, 4});
  const auto flags = ids.remainder(2) == 0;
  std::vector<MeshPtr> meshes{nullptr};
  for (const auto& mesh : op_meshes()) meshes.push_back(mesh);
  for (const auto& mesh : meshes) {
    auto place_whole = [&](const at::Tensor& t) {
      return mesh ? nnx::device_put(t, {mesh, P()}) : Array(t);
    };
    const Array a = place_whole(ids), f = place_whole(flags);
    // As LibTorch (and JAX with a Python float): 0.5 used to be taken as 0 for the integers.
    const Array half = a + 0.5, less = a - 0.25;
    CHECK(half.dtype() == torch::kFloat);
    CHECK(torch::equal(nnx::gather(half), ids + 0.5));
    CHECK(torch::equal(nnx::gather(less), ids - 0.25));
    const Array next = a + 1.0;  // a whole value keeps the integers
    CHECK(next.dtype() == torch::kLong);
    CHECK(torch::equal(nnx::gather(next), ids + 1));
    const Array counted = f + 1.0, scaled = f + 0.5;
    CHECK(torch::equal(nnx::gather(counted), flags + 1));
    CHECK(counted.dtype() == torch::kLong);
    CHECK(torch::equal(nnx::gather(scaled), flags + 0.5));
  }
}
