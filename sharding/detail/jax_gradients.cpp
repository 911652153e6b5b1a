// abs, clip, maximum and minimum with JAX's gradients, as LibTorch autograd functions.
#include <nnx/sharding/detail/jax_gradients.h>

#include <torch/csrc/autograd/custom_function.h>
#include <torch/types.h>

namespace nnx::detail {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool differentiating(const at::Tensor& x) {
  return x.requires_grad() && at::GradMode::is_enabled();
}

struct AbsLikeJax : torch::autograd::Function<AbsLikeJax> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x) {
    ctx->save_for_backward({x});
    return x.abs();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    return {at::where(x >= 0, grads[0], -grads[0])};
  }
};

// The share of the cotangent one bound lets through: 1 strictly inside it, 0.5 on it (the tie
// of jnp.maximum or jnp.minimum), 0 beyond it or at NaN.
at::Tensor bound_share(const at::Tensor& x, const c10::IValue& bound, bool lower,
                       at::ScalarType dtype) {
  const at::Scalar b = bound.toScalar();
  const at::Tensor inside = lower ? x > b : x < b;
  return inside.to(dtype) + (x == b).to(dtype) * 0.5;
}

struct ClipLikeJax : torch::autograd::Function<ClipLikeJax> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x,
                            const std::optional<at::Scalar>& min,
                            const std::optional<at::Scalar>& max) {
    ctx->save_for_backward({x});
    ctx->saved_data["min"] = min ? c10::IValue(*min) : c10::IValue();
    ctx->saved_data["max"] = max ? c10::IValue(*max) : c10::IValue();
    return at::clamp(x, min, max);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    at::Tensor grad = grads[0];
    for (const bool lower : {true, false}) {
      const c10::IValue& bound = ctx->saved_data[lower ? "min" : "max"];
      if (!bound.isNone()) grad = grad * bound_share(x, bound, lower, grad.scalar_type());
    }
    return {grad, {}, {}};
  }
};

// The share of the cotangent an operand of maximum (or minimum) gets: 1 where it alone is chosen,
// 0.5 on a tie (`half_ties`: grad * 0.5 where the operands are equal), 0 where the other is
// chosen or either is NaN; summed back to its shape.
at::Tensor extremum_share(const at::Tensor& grad, const at::Tensor& half_ties,
                          const at::Tensor& self, const at::Tensor& other, bool maximum) {
  const at::Tensor chosen = maximum ? self > other : self < other;
  const at::Tensor share = grad * chosen.to(grad.scalar_type()) + half_ties;
  return at::sum_to(share, self.sizes()).to(self.scalar_type());
}

struct ExtremumLikeJax : torch::autograd::Function<ExtremumLikeJax> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& y,
                            bool maximum) {
    ctx->save_for_backward({x, y});
    ctx->saved_data["maximum"] = maximum;
    return maximum ? at::maximum(x, y) : at::minimum(x, y);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const bool maximum = ctx->saved_data["maximum"].toBool();
    const at::Tensor& grad = grads[0];
    const at::Tensor half_ties = grad * (saved[0] == saved[1]).to(grad.scalar_type()) * 0.5;
    at::Tensor dx, dy;
    if (ctx->needs_input_grad(0))
      dx = extremum_share(grad, half_ties, saved[0], saved[1], maximum);
    if (ctx->needs_input_grad(1))
      dy = extremum_share(grad, half_ties, saved[1], saved[0], maximum);
    return {dx, dy, {}};
  }
};

}  // namespace

at::Tensor abs_with_jax_gradient(const at::Tensor& x) {
  return differentiating(x) ? AbsLikeJax::apply(x) : x.abs();
}

at::Tensor clip_with_jax_gradient(const at::Tensor& x, const std::optional<at::Scalar>& min,
                                  const std::optional<at::Scalar>& max) {
  return differentiating(x) ? ClipLikeJax::apply(x, min, max) : at::clamp(x, min, max);
}

at::Tensor extremum_with_jax_gradient(const at::Tensor& x, const at::Tensor& y, bool maximum) {
  if (differentiating(x) || differentiating(y)) return ExtremumLikeJax::apply(x, y, maximum);
  return maximum ? at::maximum(x, y) : at::minimum(x, y);
}

}  // namespace nnx::detail
