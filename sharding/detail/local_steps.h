// Redistributions that stay on this rank (slices, joining a pending sum), run from a plan the
// caller holds: an op whose inputs only slice needs neither planning again nor a new Array.
#pragma once

#include <nnx/sharding/array.h>
#include <nnx/sharding/redistribute_plan.h>

#include <optional>

namespace nnx::detail {

// Whether no step of `plan` communicates.
bool stays_local(const RedistributePlan& plan);
// x's block after `plan` (made for x's layout; stays_local), logged as redistribute logs it:
// x's own where no step changes it, else a new one kept in `held`.
const at::Tensor& run_local_steps(const Array& x, const RedistributePlan& plan,
                                  std::optional<at::Tensor>& held);

}  // namespace nnx::detail
