// Ops whose LibTorch gradient at a kink is not JAX's: here they take JAX's, as users porting
// from Flax expect the same numbers.
#pragma once

#include <ATen/core/Tensor.h>

namespace nnx::detail {

// |x|, whose gradient is the cotangent where x >= 0 (also at 0 and -0.0) and its negation
// elsewhere (NaN included), as jnp.abs; LibTorch's sign(x) drops it at 0.
at::Tensor abs_with_jax_gradient(const at::Tensor& x);

}  // namespace nnx::detail
