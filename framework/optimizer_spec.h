// The layout of a parameter's optimizer state under ZeRO (Metadata::optimizer_sharding): the
// parameter's own spec with optimizer_sharding's axes added. Shared by value_and_grad, which
// reduce-scatters gradients into it, and the Optimizer, which keeps its moments so.
#pragma once

#include <nnx/framework/variable.h>

#include <optional>
#include <string>

namespace nnx {

// The spec of `param`'s optimizer state: per dim, the parameter's axes then the axes of its
// resolved optimizer_sharding (logical names through sharding_rules and the active scope) that
// the parameter is not already split along. nullopt when that adds nothing (no
// optimizer_sharding, no mesh, or already sharded so). Errors name `path` and the fix.
std::optional<PartitionSpec> optimizer_spec(const std::string& path, const Variable& param);

}  // namespace nnx
