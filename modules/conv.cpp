// 2-d convolution layer.
#include <nnx/modules/conv.h>
#include <nnx/core/error.h>
#include <nnx/modules/detail/compute_dtype.h>
#include <nnx/sharding/astype.h>
#include <nnx/sharding/ops.h>

namespace nnx {

Conv::Conv(int64_t in_features, int64_t out_features, std::array<int64_t, 2> kernel_size,
           Rngs& rngs, ConvOptions options)
    : kernel(options.kernel_init(rngs.params(),
                                 {kernel_size[0], kernel_size[1], in_features, out_features},
                                 options.param_dtype),
             options.kernel_metadata),
      strides(options.strides),
      padding(options.padding),
      dtype(options.dtype) {
  if (options.use_bias)
    bias = Param(options.bias_init(rngs.params(), {out_features}, options.param_dtype),
                 options.bias_metadata);
}

Array Conv::operator()(const Array& x) const {
  NNX_CHECK(x.ndim() >= 3,
            "Conv takes [..., height, width, features] (any batch dims, or none for one "
            "example), got shape {}",
            to_string(x.shape()));
  const Array* b = bias ? &bias->value() : nullptr;
  const at::ScalarType type = detail::compute_dtype(dtype, {&x, &kernel.value(), b});
  // As Flax: the batch dims, however many (none for one example), flattened into one.
  const Shape& shape = x.shape();
  const Shape batch(shape.begin(), shape.end() - 3);
  Array input = astype(x, type);
  if (x.ndim() != 4) input = reshape(input, {numel(batch), shape[x.ndim() - 3],
                                             shape[x.ndim() - 2], shape[x.ndim() - 1]});
  Array y = conv2d(input, astype(kernel.value(), type), strides, padding);
  if (b) y = y + astype(*b, type);
  if (x.ndim() != 4) {
    Shape out = batch;
    out.insert(out.end(), y.shape().begin() + 1, y.shape().end());
    y = reshape(y, out);
  }
  return y;
}

}  // namespace nnx
