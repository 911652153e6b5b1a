// Moving Arrays between shardings: device_put from a whole tensor, arrays from each process's
// own data, gathering to a whole tensor, and redistribute between any two shardings of a mesh
// with the cheapest collectives. All are differentiable (design.md §4).
#pragma once

#include <nnx/sharding/array.h>
#include <nnx/sharding/redistribute_plan.h>

#include <source_location>
#include <string>
#include <vector>

namespace nnx {

// jax.device_put(x, sharding): every process passes the whole tensor and keeps its block. As in
// JAX, collective on a mesh of several processes: they first check that their tensors agree in
// dtype and shape (one small all-gather), and all throw, naming each one's, if not.
Array device_put(const at::Tensor& full, const NamedSharding& sharding);

// jax.make_array_from_process_local_data: each process passes its own block (the rows its data
// loader read); the global shape follows from the block shape and the sharding. Collective on a
// mesh of several processes: blocks of different dtypes or shapes (a short last batch) would
// make a different global array on each, so every process throws, naming each one's.
Array make_array_from_process_local_data(const NamedSharding& sharding, const at::Tensor& local);

// The whole value on every process. `where` (the caller's line) names the call in the errors of
// the collective check (NNX_CHECK_COLLECTIVES=1); leave it to its default.
at::Tensor gather(const Array& x, std::source_location where = std::source_location::current());

// x laid out by `target` (and pending sums along `partial_axes`), on x's mesh.
Array redistribute(const Array& x, const NamedSharding& target,
                   const std::vector<std::string>& partial_axes = {},
                   std::source_location where = std::source_location::current());
Array redistribute(const Array& x, const PartitionSpec& spec,
                   const std::vector<std::string>& partial_axes = {},
                   std::source_location where = std::source_location::current());
// Collective over x's mesh: runs `plan` (from plan_redistribute for x's layout) on x.
Array run_plan(const Array& x, const RedistributePlan& plan);

// Names the redistributions made while it lives (a variable's path, an op) in the log that
// NNX_LOG_REDISTRIBUTE=1 prints on rank 0 of the mesh: "[nnx redistribute] LABEL: (8, 1024):
// PartitionSpec('data', None) -> PartitionSpec(None, None): all_gather over 'data' on dim 0".
// The innermost label wins.
class RedistributeLabel {
 public:
  explicit RedistributeLabel(std::string label);
  // An op's name (or a function signature, shortened when printed), used only where no caller
  // named the redistribution and no outer op did; allocation-free, for ops' hot paths.
  static RedistributeLabel fallback(const char* op);
  ~RedistributeLabel();
  RedistributeLabel(const RedistributeLabel&) = delete;
  RedistributeLabel& operator=(const RedistributeLabel&) = delete;

 private:
  explicit RedistributeLabel(const char* op);
  bool named_;               // pushed a name, not a fallback
  const char* previous_op_;  // the fallback this one replaced
};
std::string current_redistribute_label();

// How many of each step redistribute has run on this thread (for tests and benchmarks).
struct RedistributeCounts {
  int64_t all_gather = 0, reduce_scatter = 0, all_reduce = 0, all_to_all = 0;
  int64_t local_slice = 0, to_partial = 0;
  int64_t collectives() const { return all_gather + reduce_scatter + all_reduce + all_to_all; }
};
RedistributeCounts& redistribute_counts();

}  // namespace nnx
