// The exact GELU as JAX computes it, x/2 erfc(-x/sqrt(2)), as one LibTorch autograd node that
// keeps only x for the backward pass (the composite of four ops kept three activation-sized
// tensors). Values and gradients round as the composite's do, op by op.
#pragma once

#include <ATen/core/Tensor.h>

namespace nnx::detail {

// x floating; without autograd, its values alone.
at::Tensor exact_gelu(const at::Tensor& x);

}  // namespace nnx::detail
