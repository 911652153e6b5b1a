// Elementwise functions as one LibTorch autograd node that keeps only the input, their chains
// of ops run chunk by chunk so that each chunk's intermediates stay in L2 cache instead of
// streaming through memory (exact_gelu, silu_node).
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <tuple>

namespace nnx::detail {

// Elements per chunk: five float32 buffers of a chunk fit in 2 MiB of L2 cache (there a 4096 x
// 4096 exact gelu took 1.5x LibTorch's fused kernel with 64 Ki elements, 2.8x with 16 Ki: each
// op's dispatch then counts).
constexpr int64_t kPassChunk = 64 << 10;

// A contiguous tensor shaped and typed as x, whose chunks fill(out, x[, grad]) computes from the
// same elements of x (and of grad, shaped as x), the chunks spread over the intra-op threads (the
// ops inside run on one thread each). On a GPU, in one piece: its kernels stream anyway, and
// other threads would launch on other streams.
template <class Fill, class... Same>
at::Tensor chunkwise(const at::Tensor& x, const Fill& fill, const Same&... same) {
  at::Tensor out = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  const at::Tensor out_flat = out.view(-1), x_flat = x.contiguous().view(-1);
  const std::array<at::Tensor, sizeof...(Same)> same_flat{same.contiguous().view(-1)...};
  const int64_t n = x.numel();
  auto run = [&](int64_t begin, int64_t end) {
    auto part = [&](const at::Tensor& t) {
      return begin == 0 && end == n ? t : t.slice(0, begin, end);
    };
    at::Tensor out_part = part(out_flat);
    std::apply([&](const auto&... s) { fill(out_part, part(x_flat), part(s)...); }, same_flat);
  };
  if (n <= kPassChunk || !x.is_cpu()) {
    run(0, n);
    return out;
  }
  at::parallel_for(0, (n + kPassChunk - 1) / kPassChunk, 1, [&](int64_t first, int64_t last) {
    for (int64_t c = first; c < last; ++c) run(c * kPassChunk, std::min(n, (c + 1) * kPassChunk));
  });
  return out;
}

// The node of f: Formula::values(x), Formula::gradient(x, grad) (the vector-Jacobian product, in
// its own passes), and Formula::differentiable_gradient(x, grad) (ops autograd differentiates
// again, for a second derivative).
template <class Formula>
struct ElementwiseNode : torch::autograd::Function<ElementwiseNode<Formula>> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    ctx->save_for_backward({x});
    return Formula::values(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    if (at::GradMode::is_enabled()) return {Formula::differentiable_gradient(x, grads[0])};
    return {Formula::gradient(x, grads[0])};
  }
};

// f(x) through its node where autograd records, else its values alone.
template <class Formula> at::Tensor apply_elementwise(const at::Tensor& x) {
  if (x.requires_grad() && at::GradMode::is_enabled()) return ElementwiseNode<Formula>::apply(x);
  return Formula::values(x);
}

}  // namespace nnx::detail
