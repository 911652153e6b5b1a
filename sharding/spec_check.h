// Validation of a PartitionSpec against an array shape and a mesh, with errors that name the
// variable path (or array) and the fix.
#pragma once

#include <nnx/core/shape.h>
#include <nnx/sharding/mesh.h>
#include <nnx/sharding/partition_spec.h>

#include <string_view>

namespace nnx {

// Throws on: an axis the mesh lacks, an axis used twice, a spec longer than the rank, or a dim
// not divisible by the product of its axes' sizes. `what` names the array ("layers.0.kernel").
// A spec that came through logical axis rules (`after_rules`) suggests a rule for a name the mesh
// lacks; any other names mesh axes only.
void check_spec(const PartitionSpec& spec, const Shape& shape, const Mesh& mesh,
                std::string_view what, bool after_rules = false);

// The spec padded with none up to the array's rank.
PartitionSpec pad_spec(const PartitionSpec& spec, size_t rank);

}  // namespace nnx
