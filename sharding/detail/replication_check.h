// Debug mode's check of shard_map outputs (Communicator::checking()): JAX proves from the body's
// types that an output is equal along the axes its out spec leaves out (check_vma); nnx compares
// the values once the body has run.
#pragma once

#include <nnx/sharding/partition_spec.h>

#include <ATen/core/Tensor.h>

#include <cstddef>

namespace nnx {
class Mesh;
}

namespace nnx::detail {

// Every member of `mesh` throws where the members' output `index` differs in dtype or shape, or
// where members that differ only along axes `spec` (padded) leaves out hold different values
// (compared by a hash of the bytes, -0.0 taken as 0.0). Two small all-gathers over the mesh.
void check_shard_map_output(const Mesh& mesh, const at::Tensor& local, const PartitionSpec& spec,
                            size_t index);

}  // namespace nnx::detail
