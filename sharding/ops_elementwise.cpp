// Elementwise ops: fast paths for operands laid out alike or replicated, else the plan of
// plan_elementwise (rule tables "add", "mul", "div" in op_rules.cpp).
#include <nnx/core/error.h>
#include <nnx/sharding/ops.h>
#include <nnx/sharding/detail/elementwise.h>
#include <nnx/sharding/detail/exact_gelu.h>
#include <nnx/sharding/detail/jax_gradients.h>
#include <nnx/sharding/detail/silu_node.h>

#include <torch/types.h>

namespace nnx {

namespace {

using namespace detail;

// x - y with a bool operand taken as 0 and 1 in the other's dtype, as jax.numpy does (LibTorch
// refuses any bool in a subtraction); two bools stay refused, as in both.
at::Tensor subtract_promoting_bool(const at::Tensor& x, const at::Tensor& y) {
  const at::ScalarType type = at::result_type(x, y);
  if (type != at::kBool && (x.scalar_type() == at::kBool || y.scalar_type() == at::kBool))
    return x.to(type) - y.to(type);
  return x - y;
}

}  // namespace

Array add(const Array& a, const Array& b) {
  return binary(a, b, Linearity::linear, "add", [](auto& x, auto& y) { return x + y; });
}
Array sub(const Array& a, const Array& b) {
  return binary(a, b, Linearity::linear, "sub",
                [](auto& x, auto& y) { return subtract_promoting_bool(x, y); });
}
Array mul(const Array& a, const Array& b) {
  return binary(a, b, Linearity::bilinear, "mul", [](auto& x, auto& y) { return x * y; });
}
Array div(const Array& a, const Array& b) {
  return binary(a, b, Linearity::numerator, "div", [](auto& x, auto& y) { return x / y; });
}
// Neither is linear in a pending sum: both operands resolve first. JAX's gradients at ties and
// NaN (jax_gradients.h).
Array maximum(const Array& a, const Array& b) {
  return binary_resolved(a, b, "maximum", [](auto& x, auto& y) {
    return extremum_with_jax_gradient(x, y, true);
  });
}
Array minimum(const Array& a, const Array& b) {
  return binary_resolved(a, b, "minimum", [](auto& x, auto& y) {
    return extremum_with_jax_gradient(x, y, false);
  });
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
// Of bools, jax.numpy's maximum(x, 0): int64.
Array relu(const Array& a) {
  return unary(a, false, [](const at::Tensor& x) {
    return x.scalar_type() == at::kBool ? x.to(at::kLong) : x.relu();
  });
}
// The exact form as JAX computes it (exact_gelu.h): LibTorch's kernel, x/2 (1 + erf), loses the
// negative tail in float32 (relative error 1e-4 at x = -3).
Array gelu(const Array& a, bool approximate) {
  return unary(a, false, [approximate](const at::Tensor& x) {
    const at::Tensor f = as_floating(x);
    return approximate ? torch::gelu(f, "tanh") : exact_gelu(f);
  });
}
// x * sigmoid(x), as jax.nn.silu (LibTorch's kernel, x / (1 + e^-x), rounds otherwise).
Array silu(const Array& a) {
  return unary(a, false, [](const at::Tensor& x) {
    return at::isFloatingType(x.scalar_type()) ? silu_node(x) : x * x.sigmoid();
  });
}
Array sigmoid(const Array& a) {
  return unary(a, false, [](const at::Tensor& x) { return x.sigmoid(); });
}
// Of bools, in int64 as power(x, 2) (jax.numpy gives int32 for both).
Array square(const Array& a) {
  return unary(a, false, [](const at::Tensor& x) {
    if (x.scalar_type() == at::kBool) return x.to(at::kLong);
    return x * x;
  });
}
Array rsqrt(const Array& a) {
  return unary(a, false, [](const at::Tensor& x) { return x.rsqrt(); });
}
Array power(const Array& a, double exponent) {
  // A whole exponent keeps integers integers, as jnp.power(x, 2).
  const at::Scalar e = promoting_scalar(exponent);
  if (e.isIntegral(false) && e.toLong() < 0 && at::isIntegralType(a.dtype(), true))
    throw_error("power", fmt::format("{} values cannot be raised to the negative power {}, as in "
                                     "JAX; make them floating first (nnx::astype(x, at::kFloat))",
                                     dtype_name(a.dtype()), exponent));
  return unary(a, false, [e](const at::Tensor& x) {
    // LibTorch's narrow integer kernels take the exponent in their own type: in int64, the
    // result wrapped back as jnp's is.
    if (e.isIntegral(false) && at::isIntegralType(x.scalar_type(), false) &&
        x.scalar_type() != at::kLong)
      return x.to(at::kLong).pow(e).to(x.scalar_type());
    return x.pow(e);
  });
}
Array sqrt(const Array& a) { return unary(a, false, [](const at::Tensor& x) { return x.sqrt(); }); }
Array abs(const Array& a) {
  return unary(a, false, [](const at::Tensor& x) {
    return x.scalar_type() == at::kBool ? x.clone() : abs_with_jax_gradient(x);
  });
}
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
    return clip_with_jax_gradient(x, lo, hi);
  });
}

}  // namespace nnx
