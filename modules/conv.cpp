// 2-d convolution layer.
#include <nnx/modules/conv.h>
#include <nnx/sharding/ops.h>

namespace nnx {

Conv::Conv(int64_t in_features, int64_t out_features, std::array<int64_t, 2> kernel_size,
           Rngs& rngs, ConvOptions options)
    : kernel(options.kernel_init(rngs.params(),
                                 {kernel_size[0], kernel_size[1], in_features, out_features},
                                 options.param_dtype),
             options.kernel_metadata),
      strides(options.strides),
      padding(options.padding) {
  if (options.use_bias)
    bias = Param(options.bias_init(rngs.params(), {out_features}, options.param_dtype),
                 options.bias_metadata);
}

Array Conv::operator()(const Array& x) const {
  Array y = conv2d(x, kernel.value(), strides, padding);
  return bias ? y + bias->value() : y;
}

}  // namespace nnx
