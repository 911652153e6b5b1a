// Flax's get_partition_spec / get_named_sharding: the mesh specs of a State's variables, with
// logical names resolved through each variable's sharding_rules and the active scope's rules.
#pragma once

#include <nnx/framework/state.h>
#include <nnx/sharding/named_sharding.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace nnx {

template <class T> using PathMap = std::vector<std::pair<std::string, T>>;

// The mesh-axis spec of an array of `rank` with metadata `md`; `what` names it in errors.
PartitionSpec resolve_partition_spec(const Metadata& md, size_t rank, const std::string& what);
// As above, then checked against `mesh` and `shape` (errors name `what` and the fix).
PartitionSpec checked_partition_spec(const Metadata& md, const Shape& shape, const Mesh& mesh,
                                     const std::string& what);
// The mesh-axis spec of one variable (padded to its rank; all none without out_sharding).
PartitionSpec resolve_partition_spec(const std::string& path, const Variable& variable);

PathMap<PartitionSpec> get_partition_spec(const State& state);
// As get_partition_spec, validated against the mesh and each variable's shape.
PathMap<NamedSharding> get_named_sharding(const State& state, std::shared_ptr<const Mesh> mesh);

}  // namespace nnx
