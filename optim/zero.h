// ZeRO-1 (Metadata::optimizer_sharding): a parameter's optimizer state laid out by its own spec
// with optimizer_sharding's axes added. Each replica keeps 1/data-size of the moments (Adam on 8
// data replicas: mu and nu take 2/8 of the parameter's bytes per rank instead of twice them);
// value_and_grad reduce-scatters the gradient into that layout, Optimizer::update all-gathers
// the update.
#pragma once

#include <nnx/framework/variable.h>

#include <optional>
#include <string>

namespace nnx::optim {

// The spec of `param`'s optimizer state: per dim, the parameter's axes then the axes of its
// resolved optimizer_sharding (logical names through sharding_rules and the active scope) that
// the parameter is not already split along. nullopt when that adds nothing (no
// optimizer_sharding, no mesh, or already sharded so). Errors name `path` and the fix.
std::optional<PartitionSpec> optimizer_spec(const std::string& path, const Variable& param);

}  // namespace nnx::optim
