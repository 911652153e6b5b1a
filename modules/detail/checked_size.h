// A layer's size argument checked before it shapes a parameter, so that a negative one is an
// error naming the layer and the argument rather than LibTorch's.
#pragma once

#include <nnx/core/error.h>

#include <cstdint>

namespace nnx::detail {

inline int64_t checked_size(int64_t size, const char* layer, const char* argument) {
  NNX_CHECK(size >= 0, "{}'s {} must not be negative, got {}", layer, argument, size);
  return size;
}

}  // namespace nnx::detail
