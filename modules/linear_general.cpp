// LinearGeneral: one matmul over the flattened trailing axes.
#include <nnx/core/error.h>
#include <nnx/modules/linear_general.h>
#include <nnx/modules/detail/compute_dtype.h>
#include <nnx/sharding/astype.h>
#include <nnx/sharding/ops.h>

namespace nnx {

namespace {
Shape concat(Shape a, const Shape& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
}  // namespace

LinearGeneral::LinearGeneral(Shape in_features, Shape out_features, Rngs& rngs,
                             LinearGeneralOptions options)
    : kernel(as_matrix(options.kernel_init, in_features.size())(
                 rngs.params(), concat(in_features, out_features), options.param_dtype),
             options.kernel_metadata),
      in_dims(static_cast<int64_t>(in_features.size())),
      dtype(options.dtype) {
  if (options.use_bias)
    bias = Param(as_matrix(options.bias_init, 0)(rngs.params(), out_features, options.param_dtype),
                 options.bias_metadata);
}

Array LinearGeneral::operator()(const Array& x) const {
  const Shape& k = kernel.shape();
  const Shape in_shape(k.begin(), k.begin() + in_dims);
  if (x.shape().size() < in_shape.size() ||
      Shape(x.shape().end() - in_dims, x.shape().end()) != in_shape)
    detail::throw_error("LinearGeneral", fmt::format("input {} does not end with the kernel's "
                                                     "input dims {}",
                                                     to_string(x.shape()), to_string(in_shape)));
  const int64_t in = numel(Shape(k.begin(), k.begin() + in_dims));
  const int64_t out = numel(Shape(k.begin() + in_dims, k.end()));
  Shape lead(x.shape().begin(), x.shape().end() - in_dims);
  Shape out_shape = concat(lead, Shape(k.begin() + in_dims, k.end()));
  // One example (no leading dims) goes through as a batch of one.
  Shape flat_x = lead.empty() ? Shape{1} : lead;
  flat_x.push_back(in);
  const Array* b = bias ? &bias->value() : nullptr;
  const at::ScalarType type = detail::compute_dtype(dtype, {&x, &kernel.value(), b});
  Array y = matmul(reshape(astype(x, type), flat_x),
                   reshape(astype(kernel.value(), type), {in, out}));
  y = reshape(y, out_shape);
  return b ? y + astype(*b, type) : y;
}

}  // namespace nnx
