// nnx::scan: K train steps in one call over data stacked [K, batch, ...], model and optimizer
// carried by the step function (captured by reference), as nnx.scan over a train step:
//   auto losses = nnx::scan([&](const nnx::Array& x, const nnx::Array& y) {
//     return train_step(model, optimizer, x, y); }, xs, ys);   // losses [K]
// Each step's slice keeps the stacked array's sharding on the remaining dims.
#pragma once

#include <nnx/sharding/array.h>

#include <vector>

namespace nnx {

namespace detail {
// Step k of an array stacked along dim 0 (dim 0 must not be sharded).
Array step_slice(const Array& stacked, int64_t k);
// The step outputs stacked along a new dim 0, with their sharding.
Array stack_steps(const std::vector<Array>& outputs);
// K from the stacked inputs' dim 0 (all equal, at least 1).
int64_t scan_length(const std::vector<const Array*>& stacked);
}  // namespace detail

template <class StepFn, class... Stacked>
Array scan(StepFn&& step_fn, const Array& first, const Stacked&... rest) {
  const int64_t steps = detail::scan_length({&first, &rest...});
  std::vector<Array> outputs;
  outputs.reserve(steps);
  for (int64_t k = 0; k < steps; ++k)
    outputs.push_back(step_fn(detail::step_slice(first, k), detail::step_slice(rest, k)...));
  return detail::stack_steps(outputs);
}

}  // namespace nnx
