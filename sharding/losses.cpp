// Losses composed from the sharded ops, so their rules and gradients come for free.
#include <nnx/sharding/losses.h>

#include <nnx/sharding/ops.h>

namespace nnx {

Array l2_loss(const Array& predictions, const Array& targets) {
  return mul(square(sub(predictions, targets)), 0.5);
}

Array l2_loss(const Array& predictions) { return mul(square(predictions), 0.5); }

}  // namespace nnx
