// Elementwise ops: fast paths for operands laid out alike or replicated, else the plan of
// plan_elementwise (rule tables "add", "mul", "div" in op_rules.cpp).
#include <nnx/core/error.h>
#include <nnx/sharding/op_plan.h>
#include <nnx/sharding/ops.h>
#include <nnx/sharding/redistribute.h>
#include <nnx/sharding/detail/ops_common.h>
#include <nnx/sharding/detail/plan_cache.h>

#include <torch/types.h>

#include <cmath>
#include <source_location>

namespace nnx {

namespace {

using namespace detail;

// Throws, naming both shapes, unless a and b broadcast together (numpy's rule).
void check_broadcast(const Array& a, const Array& b, const char* op) {
  const size_t n = std::max(a.shape().size(), b.shape().size());
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.shape().size() ? 1 : a.shape()[i - (n - a.shape().size())];
    int64_t db = i < n - b.shape().size() ? 1 : b.shape()[i - (n - b.shape().size())];
    if (da != db && da != 1 && db != 1)
      throw_error(op, fmt::format("shapes {} and {} do not broadcast (dim {}: {} vs {})",
                                  shape_str(a), shape_str(b), i, da, db));
  }
}

// fn(a, b), broadcast by LibTorch; where it refuses, the error names both shapes.
template <class Fn>
at::Tensor broadcast_by_torch(const Array& a0, const Array& b0, const char* op, Fn& fn,
                              const at::Tensor& a, const at::Tensor& b) {
  try {
    return fn(a, b);
  } catch (const c10::Error&) {
    check_broadcast(a0, b0, op);  // names the shapes when they do not broadcast
    throw;
  }
}

template <class Fn>
Array binary(const Array& a0, const Array& b0, Linearity linearity, const char* op, Fn fn) {
  // The common case first: operands laid out alike need no rule (the result is laid out as
  // they are), so it costs what the LibTorch op costs.
  if (a0.mesh() && a0.mesh() == b0.mesh() && a0.partial_axes().empty() &&
      b0.partial_axes().empty() && !a0.initializer() &&
      (a0.layout() == b0.layout() || (a0.shape() == b0.shape() && a0.spec() == b0.spec())))
    return a0.with_local(fn(a0.local(), b0.local()));
  if (!a0.mesh() && !b0.mesh() && a0.defined() && b0.defined()) {
    at::Tensor out = broadcast_by_torch(a0, b0, op, fn, a0.local(), b0.local());
    // Not broadcast: the result shares a0's layout.
    if (!a0.initializer() && out.sizes().equals(a0.shape())) return a0.with_local(std::move(out));
    return Array(std::move(out));
  }
  // An input is on a mesh (both on none were taken above; an empty one is an error here).
  const auto& mesh = common_mesh({&a0, &b0}, op);
  if (all_replicated({&a0, &b0}))  // no rule: LibTorch broadcasts
    return replicated_result(broadcast_by_torch(a0, b0, op, fn, local_on_mesh(a0, mesh),
                                                local_on_mesh(b0, mesh)),
                             mesh, {&a0, &b0});
  check_broadcast(a0, b0, op);
  std::optional<Array> held_a, held_b, laid_a, laid_b;
  const Array& a = on_mesh(a0, mesh, held_a);
  const Array& b = on_mesh(b0, mesh, held_b);
  const SharedPlan plan = cached_plan(op, static_cast<int64_t>(linearity), {&a, &b}, [&] {
    return plan_elementwise(op, layout_of(a), layout_of(b), linearity);
  });
  auto label = RedistributeLabel::fallback(op);
  const Array& la = planned_input(a, plan->plan, 0, laid_a);
  const Array& lb = planned_input(b, plan->plan, 1, laid_b);
  return planned_result(fn(la.local(), lb.local()), mesh, *plan);
}

// A unary op; `linear` ones (x * c) keep pending sums, others resolve them first.
// `op` (the calling op, by default) labels a redistribution in NNX_LOG_REDISTRIBUTE's log.
template <class Fn>
Array unary(const Array& a, bool linear, Fn fn,
            std::source_location op = std::source_location::current()) {
  if (!linear && !a.partial_axes().empty()) return unary(resolved(a, op), true, fn, op);
  if (!a.initializer()) return a.with_local(fn(a.local()));  // laid out as its operand
  if (!a.mesh()) return Array(fn(a.local()));
  return make_result(fn(a.local()), a.shape(), a.mesh(), dims_of(a), a.partial_axes());
}

// `value` as an integer Scalar where it is a whole number, so that integer arrays stay integer
// (LibTorch and JAX promote them only for a fractional value).
at::Scalar promoting_scalar(double value) {
  if (std::trunc(value) == value && std::abs(value) < 0x1p63)
    return at::Scalar(static_cast<int64_t>(value));
  return at::Scalar(value);
}

// `value` as a 0-d operand for `a`: in a's dtype where that holds it; integer and bool arrays
// take a fractional value as floats (as LibTorch and JAX promote), not truncated.
Array scalar_like(const Array& a, double value) {
  const at::ScalarType dtype = at::result_type(a.local(), promoting_scalar(value));
  return Array(torch::full({}, value, a.local().options().dtype(dtype).requires_grad(false)));
}

// Integer and bool values as floats of the default dtype, as JAX promotes them for float-only
// functions; floating values as they are.
at::Tensor as_floating(const at::Tensor& x) {
  return at::isFloatingType(x.scalar_type()) ? x : x.to(c10::get_default_dtype_as_scalartype());
}

}  // namespace

Array add(const Array& a, const Array& b) {
  return binary(a, b, Linearity::linear, "add", [](auto& x, auto& y) { return x + y; });
}
Array sub(const Array& a, const Array& b) {
  return binary(a, b, Linearity::linear, "sub", [](auto& x, auto& y) { return x - y; });
}
Array mul(const Array& a, const Array& b) {
  return binary(a, b, Linearity::bilinear, "mul", [](auto& x, auto& y) { return x * y; });
}
Array div(const Array& a, const Array& b) {
  return binary(a, b, Linearity::numerator, "div", [](auto& x, auto& y) { return x / y; });
}
// Neither is linear in a pending sum: both operands resolve first.
Array maximum(const Array& a, const Array& b) {
  return binary(resolved(a), resolved(b), Linearity::numerator, "maximum",
                [](auto& x, auto& y) { return at::maximum(x, y); });
}
Array minimum(const Array& a, const Array& b) {
  return binary(resolved(a), resolved(b), Linearity::numerator, "minimum",
                [](auto& x, auto& y) { return at::minimum(x, y); });
}
Array add(const Array& a, double b) { return add(a, scalar_like(a, b)); }
Array mul(const Array& a, double b) {
  return unary(a, true, [b](const at::Tensor& x) { return x * b; });
}
Array neg(const Array& a) {
  return unary(a, true, [](const at::Tensor& x) { return -x; });
}
Array exp(const Array& a) { return unary(a, false, [](const at::Tensor& x) { return x.exp(); }); }
Array log(const Array& a) { return unary(a, false, [](const at::Tensor& x) { return x.log(); }); }
Array tanh(const Array& a) { return unary(a, false, [](const at::Tensor& x) { return x.tanh(); }); }
Array relu(const Array& a) { return unary(a, false, [](const at::Tensor& x) { return x.relu(); }); }
Array gelu(const Array& a, bool approximate) {
  return unary(a, false, [approximate](const at::Tensor& x) {
    return torch::gelu(x, approximate ? "tanh" : "none");
  });
}
Array silu(const Array& a) {
  return unary(a, false, [](const at::Tensor& x) { return x * x.sigmoid(); });
}
Array sigmoid(const Array& a) {
  return unary(a, false, [](const at::Tensor& x) { return x.sigmoid(); });
}
Array square(const Array& a) {
  return unary(a, false, [](const at::Tensor& x) { return x * x; });
}
Array rsqrt(const Array& a) {
  return unary(a, false, [](const at::Tensor& x) { return x.rsqrt(); });
}
Array power(const Array& a, double exponent) {
  return unary(a, false, [exponent](const at::Tensor& x) { return x.pow(exponent); });
}
Array sqrt(const Array& a) { return unary(a, false, [](const at::Tensor& x) { return x.sqrt(); }); }
Array abs(const Array& a) { return unary(a, false, [](const at::Tensor& x) { return x.abs(); }); }
Array sin(const Array& a) { return unary(a, false, [](const at::Tensor& x) { return x.sin(); }); }
Array cos(const Array& a) { return unary(a, false, [](const at::Tensor& x) { return x.cos(); }); }
Array softplus(const Array& a) {
  // log(e^x + e^0), exact for large x (LibTorch's softplus returns x itself above 20).
  return unary(a, false, [](const at::Tensor& x) {
    const at::Tensor f = as_floating(x);
    return at::logaddexp(f, at::zeros({}, f.options()));
  });
}
Array log_sigmoid(const Array& a) {
  return unary(a, false, [](const at::Tensor& x) { return at::log_sigmoid(as_floating(x)); });
}
Array clip(const Array& a, std::optional<double> min, std::optional<double> max) {
  if (min && max && *min > *max)
    throw_error("clip", fmt::format("min {} is above max {}; jnp.clip would return max "
                                    "everywhere: swap the bounds",
                                    *min, *max));
  if (!min && !max) return a;
  // Whole-number bounds keep an integer array's dtype, as in JAX.
  auto bound = [](std::optional<double> v) -> std::optional<at::Scalar> {
    return v ? std::optional<at::Scalar>(promoting_scalar(*v)) : std::nullopt;
  };
  return unary(a, false, [lo = bound(min), hi = bound(max)](const at::Tensor& x) {
    return at::clamp(x, lo, hi);
  });
}

}  // namespace nnx
