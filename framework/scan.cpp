// Slicing and stacking along the scanned dim.
#include <nnx/core/error.h>
#include <nnx/framework/scan.h>

#include <torch/types.h>

namespace nnx::detail {

Array step_slice(const Array& stacked, int64_t k) {
  NNX_CHECK(stacked.ndim() >= 1, "a scanned array needs a leading steps dim, got a scalar");
  NNX_CHECK(k >= 0 && k < stacked.shape()[0], "step {} is out of range for {} steps", k,
            stacked.shape()[0]);
  at::Tensor local = stacked.local().select(0, k);
  if (!stacked.mesh()) return Array(local);
  NNX_CHECK(stacked.spec()[0].names().empty(),
            "the steps dim (0) of a scanned array is sharded by {}; shard the batch dim "
            "instead, e.g. P(none, \"data\")",
            stacked.spec().to_string());
  std::vector<SpecEntry> rest(stacked.spec().entries().begin() + 1, stacked.spec().entries().end());
  Shape shape(stacked.shape().begin() + 1, stacked.shape().end());
  return Array::from_local(local, shape, {stacked.mesh(), PartitionSpec(rest)},
                           stacked.partial_axes());
}

Array stack_steps(const std::vector<Array>& outputs) {
  NNX_CHECK(!outputs.empty(), "no steps ran");
  const Array& first = outputs.front();
  std::vector<at::Tensor> locals;
  for (const auto& o : outputs) {
    NNX_CHECK(o.shape() == first.shape() && o.spec() == first.spec() &&
                  o.partial_axes() == first.partial_axes() && o.mesh() == first.mesh(),
              "step outputs differ in shape or sharding: {} {} and {} {}",
              to_string(first.shape()), first.spec().to_string(), to_string(o.shape()),
              o.spec().to_string());
    locals.push_back(o.local().detach());
  }
  at::Tensor stacked = torch::stack(locals);
  if (!first.mesh()) return Array(stacked);
  std::vector<SpecEntry> entries{SpecEntry()};
  entries.insert(entries.end(), first.spec().entries().begin(), first.spec().entries().end());
  Shape shape{static_cast<int64_t>(outputs.size())};
  shape.insert(shape.end(), first.shape().begin(), first.shape().end());
  return Array::from_local(stacked, shape, {first.mesh(), PartitionSpec(entries)},
                           first.partial_axes());
}

int64_t scan_length(const std::vector<const Array*>& stacked) {
  int64_t steps = -1;
  for (const Array* a : stacked) {
    NNX_CHECK(a->ndim() >= 1, "a scanned array needs a leading steps dim, got a scalar");
    NNX_CHECK(steps < 0 || a->shape()[0] == steps,
              "scanned arrays disagree on the number of steps: {} and {} (dim 0)", steps,
              a->shape()[0]);
    steps = a->shape()[0];
  }
  NNX_CHECK(steps >= 1, "nothing to scan: the steps dim is empty");
  return steps;
}

}  // namespace nnx::detail
