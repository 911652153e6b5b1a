// A redistribution as data: the list of steps that takes an array from one layout to another,
// computed from the two layouts alone (no tensors, no communication), printable and testable.
// redistribute() plans, logs the plan when NNX_LOG_REDISTRIBUTE=1, then runs it.
#pragma once

#include <nnx/core/shape.h>
#include <nnx/sharding/partition_spec.h>

#include <map>

#include <string>
#include <vector>

namespace nnx {

struct RedistributeStep {
  enum class Kind { reduce_scatter, all_reduce, all_to_all, all_gather, slice, to_partial };
  Kind kind;
  std::string axis;    // the mesh axis the step works over
  int64_t dim = -1;    // the dim it splits (reduce_scatter, slice), joins (all_gather), or frees
  int64_t to_dim = -1; // all_to_all: the dim that takes the axis over
  const char* name() const;  // "all_gather", "slice", ...
  bool communicates() const { return kind != Kind::slice && kind != Kind::to_partial; }
  std::string to_string() const;  // "all_gather over 'a' on dim 0"
};

struct RedistributePlan {
  PartitionSpec from, to;  // padded to the array's rank
  std::vector<std::string> from_partial, to_partial;
  std::vector<RedistributeStep> steps;
  // "PartitionSpec('a', None) -> PartitionSpec(None, 'a'): all_to_all over 'a' from dim 0 to
  // dim 1"; "(no steps)" when the layouts agree.
  std::string to_string() const;
};

// The steps from (from, from_partial) to (to, to_partial) for an array of `rank` dims: resolve
// pending sums the target drops (reduce_scatter into a dim that gains exactly that axis, else
// all_reduce), move a lone axis to the whole dim that wants it (all_to_all), gather the minor
// axes a dim loses, slice the axes it gains, then mark new pending sums.
RedistributePlan plan_redistribute(const PartitionSpec& from,
                                   const std::vector<std::string>& from_partial,
                                   const PartitionSpec& to,
                                   const std::vector<std::string>& to_partial, size_t rank);

// Bytes each rank receives running `plan` on an array of global `shape` with `itemsize`-byte
// elements, given the mesh's axis sizes (ring algorithms: all_gather (n-1)B, reduce_scatter
// and all_to_all (n-1)B/n, all_reduce 2(n-1)B/n of a B-byte block); slices are free.
int64_t plan_bytes_per_rank(const RedistributePlan& plan, const Shape& shape,
                            const std::map<std::string, int64_t>& axis_sizes, int64_t itemsize);

}  // namespace nnx
