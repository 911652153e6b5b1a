// jax.nn.silu's x * sigmoid(x) as one LibTorch autograd node that keeps only x for the backward
// pass (the two-op composite kept sigmoid(x) too), its passes chunked as exact_gelu's. Values
// and gradients round as the composite's do, op by op.
#pragma once

#include <ATen/core/Tensor.h>

namespace nnx::detail {

// x floating; without autograd, its values alone.
at::Tensor silu_node(const at::Tensor& x);

}  // namespace nnx::detail
