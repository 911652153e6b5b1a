// visualize_sharding: a text picture of which processes hold which block of a 1-d or 2-d
// array, like jax.debug.visualize_array_sharding. No communication.
#pragma once

#include <nnx/sharding/array.h>

#include <string>

namespace nnx {

std::string visualize_sharding(const Array& array);
// The same for a shape laid out by a sharding (no array needed).
std::string visualize_sharding(const Shape& shape, const NamedSharding& sharding,
                               const std::vector<std::string>& partial_axes = {});

}  // namespace nnx
