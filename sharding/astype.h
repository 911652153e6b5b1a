// astype: an Array's values in another dtype, on the same layout (jnp.astype). Differentiable:
// the gradient comes back in the original dtype, so float32 parameters used in bfloat16
// computations get float32 gradients.
#pragma once

#include <nnx/sharding/array.h>

#include <optional>

namespace nnx {

Array astype(const Array& x, at::ScalarType dtype);
// x unchanged when no dtype is given (a layer's optional compute dtype).
Array astype(const Array& x, std::optional<at::ScalarType> dtype);

}  // namespace nnx
