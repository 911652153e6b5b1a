// How many communicators nnx has made and not yet freed (the world is not counted): meshes free
// theirs when they go, so this returns to where it was.
#pragma once

#include <cstdint>

namespace nnx::detail {
int64_t live_communicators();
}  // namespace nnx::detail
