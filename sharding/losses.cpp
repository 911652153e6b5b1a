// Losses composed from the sharded ops, so their rules and gradients come for free.
#include <nnx/sharding/losses.h>

#include <nnx/core/error.h>
#include <nnx/sharding/astype.h>
#include <nnx/sharding/ops.h>
#include <nnx/sharding/detail/ops_common.h>

#include <fmt/format.h>

namespace nnx {

Array l2_loss(const Array& predictions, const Array& targets) {
  detail::check_same_shape(predictions, targets, "l2_loss");
  return mul(square(sub(predictions, targets)), 0.5);
}

Array l2_loss(const Array& predictions) { return mul(square(predictions), 0.5); }

Array squared_error(const Array& predictions, const Array& targets) {
  detail::check_same_shape(predictions, targets, "squared_error");
  return square(sub(predictions, targets));
}

Array huber_loss(const Array& predictions, const Array& targets, double delta) {
  if (!(delta > 0))
    detail::throw_error("huber_loss", fmt::format("delta must be positive, got {}", delta));
  const Array errors = abs(sub(predictions, targets));
  const Array quadratic = clip(errors, std::nullopt, delta);  // min(|e|, delta)
  return add(mul(square(quadratic), 0.5), mul(sub(errors, quadratic), delta));
}

Array sigmoid_binary_cross_entropy(const Array& logits, const Array& labels) {
  // As optax writes it, labels in the logits' dtype (bool labels too): -y log(sigmoid(x)) -
  // (1 - y) log(sigmoid(-x)).
  const Array y = astype(labels, logits.dtype());
  const Array log_p = log_sigmoid(logits), log_not_p = log_sigmoid(neg(logits));
  return sub(neg(mul(y, log_p)), mul(add(neg(y), 1.0), log_not_p));
}

Array softmax_cross_entropy(const Array& logits, const Array& labels) {
  if (logits.ndim() < 1 || logits.shape() != labels.shape())
    detail::throw_error(
        "softmax_cross_entropy",
        fmt::format("logits [..., classes] and labels of the same shape expected, got {} and {}; "
                    "for integer labels use softmax_cross_entropy_with_integer_labels",
                    to_string(logits.shape()), to_string(labels.shape())));
  return neg(sum(mul(labels, log_softmax(logits, -1)), {-1}));
}

}  // namespace nnx
