// Linear layer.
#include <nnx/modules/linear.h>
#include <nnx/sharding/astype.h>
#include <nnx/sharding/ops.h>

namespace nnx {

Linear::Linear(int64_t in_features, int64_t out_features, Rngs& rngs, LinearOptions options)
    : kernel(options.kernel_init(rngs.params(), {in_features, out_features}, options.param_dtype),
             options.kernel_metadata),
      dtype(options.dtype) {
  if (options.use_bias)
    bias = Param(options.bias_init(rngs.params(), {out_features}, options.param_dtype),
                 options.bias_metadata);
}

Array Linear::operator()(const Array& x) const {
  Array k = astype(kernel.value(), dtype), input = astype(x, dtype);
  return bias ? linear(input, k, astype(bias->value(), dtype)) : matmul(input, k);
}

}  // namespace nnx
