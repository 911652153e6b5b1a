#include <nnx/sharding/detail/jax_gradients.h>

#include <torch/csrc/autograd/custom_function.h>
#include <torch/types.h>

namespace nnx::detail {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

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

}  // namespace

at::Tensor abs_with_jax_gradient(const at::Tensor& x) {
  if (!x.requires_grad() || !at::GradMode::is_enabled()) return x.abs();
  return AbsLikeJax::apply(x);
}

}  // namespace nnx::detail
