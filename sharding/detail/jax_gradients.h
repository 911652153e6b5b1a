// Ops whose LibTorch gradient at a kink is not JAX's: here they take JAX's, as users porting
// from Flax expect the same numbers. Without autograd they are LibTorch's own calls.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

#include <optional>

namespace nnx::detail {

// |x|, whose gradient is the cotangent where x >= 0 (also at 0 and -0.0) and its negation
// elsewhere (NaN included), as jnp.abs; LibTorch's sign(x) drops it at 0.
at::Tensor abs_with_jax_gradient(const at::Tensor& x);

// clamp(x, min, max), whose gradient is jnp.clip's, maximum then minimum: per bound, the
// cotangent strictly inside, half of it on the bound (a quarter where min = max = x), none
// outside or at NaN. LibTorch's clamp passes none on a scalar bound.
at::Tensor clip_with_jax_gradient(const at::Tensor& x, const std::optional<at::Scalar>& min,
                                  const std::optional<at::Scalar>& max);

// maximum(x, y), or minimum where `maximum` is false, whose gradient is jnp.maximum's (or
// jnp.minimum's): the cotangent to the operand chosen, half to each on a tie, none to either where
// one is NaN. LibTorch passes all of it to both at NaN.
at::Tensor extremum_with_jax_gradient(const at::Tensor& x, const at::Tensor& y, bool maximum);

}  // namespace nnx::detail
