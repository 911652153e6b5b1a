// The layout of a whole array: every dim unsplit, nothing pending. Arrays on no mesh have it, and
// so do replicated op results on a mesh.
#pragma once

#include <nnx/sharding/array.h>

#include <c10/util/ArrayRef.h>

#include <memory>

namespace nnx::detail {

// The whole layout of shape `sizes`, shared with the last arrays of that shape this thread made:
// an op's output then costs no allocation for its layout.
std::shared_ptr<const ArrayLayout> whole_layout(at::IntArrayRef sizes);

}  // namespace nnx::detail
