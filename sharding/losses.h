// Losses beyond cross_entropy, softmax_cross_entropy_with_integer_labels and mean_squared_error
// (sharding/ops.h), with optax's names and definitions; they follow the sharding of their inputs.
#pragma once

#include <nnx/sharding/array.h>

namespace nnx {

// optax.l2_loss: 0.5 * (predictions - targets)^2, elementwise (reduce it with nnx::mean or sum).
Array l2_loss(const Array& predictions, const Array& targets);
// optax.l2_loss(predictions): 0.5 * predictions^2.
Array l2_loss(const Array& predictions);
// optax.squared_error: (predictions - targets)^2, elementwise.
Array squared_error(const Array& predictions, const Array& targets);
// optax.huber_loss: 0.5 e^2 where |e| <= delta, else delta * (|e| - 0.5 delta), for
// e = predictions - targets, elementwise.
Array huber_loss(const Array& predictions, const Array& targets, double delta = 1.0);
// optax.sigmoid_binary_cross_entropy: the loss of each logit against a label in [0, 1],
// elementwise; stable for logits of any size.
Array sigmoid_binary_cross_entropy(const Array& logits, const Array& labels);
// optax.softmax_cross_entropy: logits [..., classes] against a distribution over the classes
// (labels of the same shape); the loss of each example, [...].
Array softmax_cross_entropy(const Array& logits, const Array& labels);

}  // namespace nnx
