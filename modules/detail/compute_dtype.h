// The dtype a layer computes in (Flax's promote_dtype).
#pragma once

#include <nnx/sharding/array.h>

#include <initializer_list>
#include <optional>

namespace nnx::detail {

// `dtype` where the layer sets one; else the type its input and parameters promote to, so a
// bfloat16 input meets float32 parameters in float32. Null operands are left out.
at::ScalarType compute_dtype(const std::optional<at::ScalarType>& dtype,
                             std::initializer_list<const Array*> operands);

}  // namespace nnx::detail
