// Stepping a transformation's state all or nothing: the update runs on a copy whose variables are
// new handles to the same values, and only a finished update is assigned back.
#pragma once

#include <nnx/optim/transform.h>

namespace nnx::optim::detail {

// New variables holding the same values (no tensor is copied).
TxState shallow_copy(const TxState& state);
// Every variable of `into` takes the value of its counterpart in `from` (a shallow_copy of it).
void assign_values(TxState& into, const TxState& from);

}  // namespace nnx::optim::detail
