#include <nnx/sharding/detail/silu_node.h>

#include <nnx/sharding/detail/chunked_passes.h>

#include <torch/types.h>

namespace nnx::detail {

namespace {

struct Silu {
  static at::Tensor values(const at::Tensor& x) {
    return chunkwise(x, [](at::Tensor& out, const at::Tensor& xs) {
      at::sigmoid_out(out, xs).mul_(xs);
    });
  }
  // The composite's two paths to x: the cotangent times sigmoid(x), and LibTorch's sigmoid
  // backward of the cotangent times x; products commute exactly.
  static at::Tensor gradient(const at::Tensor& x, const at::Tensor& grad) {
    return chunkwise(
        x,
        [](at::Tensor& out, const at::Tensor& xs, const at::Tensor& grads) {
          const at::Tensor sigmoid = at::sigmoid(xs);
          at::Tensor through_sigmoid = at::mul(grads, xs);
          at::sigmoid_backward_out(through_sigmoid, through_sigmoid, sigmoid);
          at::mul_out(out, grads, sigmoid).add_(through_sigmoid);
        },
        grad);
  }
  static at::Tensor differentiable_gradient(const at::Tensor& x, const at::Tensor& grad) {
    const at::Tensor sigmoid = x.sigmoid();
    return grad * sigmoid + at::sigmoid_backward(grad * x, sigmoid);
  }
};

}  // namespace

at::Tensor silu_node(const at::Tensor& x) { return apply_elementwise<Silu>(x); }

}  // namespace nnx::detail
