// Moving Arrays between shardings: device_put from a whole tensor, arrays from each process's
// own data, gathering to a whole tensor, and redistribute between any two shardings of a mesh
// with the cheapest collectives. All are differentiable (DESIGN.md 3).
#pragma once

#include <nnx/framework/array.h>

#include <string>
#include <vector>

namespace nnx {

// jax.device_put(x, sharding): every process passes the whole tensor and keeps its block.
Array device_put(const at::Tensor& full, const NamedSharding& sharding);

// jax.make_array_from_process_local_data: each process passes its own block (the rows its data
// loader read); the global shape follows from the block shape and the sharding.
Array make_array_from_process_local_data(const NamedSharding& sharding, const at::Tensor& local);

// The whole value on every process.
at::Tensor gather(const Array& x);

// x laid out by `target` (and pending sums along `partial_axes`), on x's mesh.
Array redistribute(const Array& x, const NamedSharding& target,
                   const std::vector<std::string>& partial_axes = {});
Array redistribute(const Array& x, const PartitionSpec& spec,
                   const std::vector<std::string>& partial_axes = {});

// How many of each step redistribute has run on this thread (for tests and benchmarks).
struct RedistributeCounts {
  int64_t all_gather = 0, reduce_scatter = 0, all_reduce = 0, all_to_all = 0;
  int64_t local_slice = 0, to_partial = 0;
  int64_t collectives() const { return all_gather + reduce_scatter + all_reduce + all_to_all; }
};
RedistributeCounts& redistribute_counts();

}  // namespace nnx
