// Losses beyond cross_entropy and mean_squared_error (sharding/ops.h), with optax's names and
// definitions; they follow the sharding of their inputs.
#pragma once

#include <nnx/sharding/array.h>

namespace nnx {

// optax.l2_loss: 0.5 * (predictions - targets)^2, elementwise (reduce it with nnx::mean or sum).
Array l2_loss(const Array& predictions, const Array& targets);
// optax.l2_loss(predictions): 0.5 * predictions^2.
Array l2_loss(const Array& predictions);

}  // namespace nnx
