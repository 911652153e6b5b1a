// Dropout layer.
#include <nnx/core/error.h>
#include <nnx/modules/dropout.h>
#include <nnx/sharding/ops.h>

namespace nnx {

Dropout::Dropout(double dropout_rate, Rngs& streams, DropoutOptions options)
    : rngs(streams.stream(options.rng_collection).fork()),
      rate(dropout_rate),
      deterministic(options.deterministic) {
  NNX_CHECK(rate >= 0 && rate <= 1, "dropout rate must lie in [0, 1], got {}", rate);
}

Array Dropout::operator()(const Array& x) {
  if (!is_training() || deterministic || rate == 0) return x;
  return dropout(x, rate, rngs());
}

}  // namespace nnx
