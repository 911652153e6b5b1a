// Linear layer.
#include <nnx/modules/linear.h>
#include <nnx/modules/detail/checked_size.h>
#include <nnx/modules/detail/compute_dtype.h>
#include <nnx/sharding/astype.h>
#include <nnx/sharding/ops.h>

namespace nnx {

Linear::Linear(int64_t in_features, int64_t out_features, Rngs& rngs, LinearOptions options)
    : kernel(options.kernel_init(rngs.params(),
                                 {detail::checked_size(in_features, "Linear", "in_features"),
                                  detail::checked_size(out_features, "Linear", "out_features")},
                                 options.param_dtype),
             options.kernel_metadata),
      dtype(options.dtype) {
  if (options.use_bias)
    bias = Param(options.bias_init(rngs.params(), {out_features}, options.param_dtype),
                 options.bias_metadata);
}

Array Linear::operator()(const Array& x) const {
  NNX_CHECK(x.ndim() >= 1 && x.shape().back() == kernel.shape()[0],
            "this Linear takes inputs [..., {}] (in_features), got {}", kernel.shape()[0],
            to_string(x.shape()));
  const Array* b = bias ? &bias->value() : nullptr;
  const at::ScalarType type = detail::compute_dtype(dtype, {&x, &kernel.value(), b});
  // One example, [in] -> [out], as in Flax and torch.nn.Linear: matmul takes a vector.
  const Array k = astype(kernel.value(), type), input = astype(x, type);
  return b ? linear(input, k, astype(*b, type)) : matmul(input, k);
}

}  // namespace nnx
