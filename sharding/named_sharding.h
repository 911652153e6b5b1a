// NamedSharding: a mesh plus a PartitionSpec over its axis names, as jax.sharding.NamedSharding.
#pragma once

#include <nnx/sharding/mesh.h>
#include <nnx/sharding/partition_spec.h>

#include <memory>

namespace nnx {

struct NamedSharding {
  std::shared_ptr<const Mesh> mesh;
  PartitionSpec spec;
  std::string to_string() const;
};

}  // namespace nnx
