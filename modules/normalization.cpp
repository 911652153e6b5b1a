// Normalization layers.
#include <nnx/modules/normalization.h>
#include <nnx/modules/detail/checked_size.h>
#include <nnx/sharding/astype.h>
#include <nnx/sharding/ops.h>

namespace nnx {

namespace {
std::optional<Array> value_of(const std::optional<Param>& p) {
  if (!p) return std::nullopt;
  return p->value();
}
// The dtype the statistics are computed in: the parameters', float32 without any.
at::ScalarType stats_dtype(const std::optional<Param>& scale) {
  return scale ? scale->value().dtype() : at::kFloat;
}
}  // namespace

LayerNorm::LayerNorm(int64_t num_features, Rngs& rngs, NormOptions options)
    : epsilon(options.epsilon), dtype(options.dtype) {
  detail::checked_size(num_features, "LayerNorm", "num_features");
  if (options.use_scale)
    scale = Param(initializers::ones()(rngs.params(), {num_features}, options.param_dtype),
                  options.scale_metadata);
  if (options.use_bias)
    bias = Param(initializers::zeros()(rngs.params(), {num_features}, options.param_dtype),
                 options.bias_metadata);
}

Array LayerNorm::operator()(const Array& x) const {
  if (!dtype) return layer_norm(x, value_of(scale), value_of(bias), epsilon);
  return astype(layer_norm(astype(x, stats_dtype(scale)), value_of(scale), value_of(bias), epsilon),
                *dtype);
}

RMSNorm::RMSNorm(int64_t num_features, Rngs& rngs, NormOptions options)
    : epsilon(options.epsilon), dtype(options.dtype) {
  detail::checked_size(num_features, "RMSNorm", "num_features");
  if (options.use_scale)
    scale = Param(initializers::ones()(rngs.params(), {num_features}, options.param_dtype),
                  options.scale_metadata);
}

Array RMSNorm::operator()(const Array& x) const {
  if (!dtype) return rms_norm(x, value_of(scale), epsilon);
  return astype(rms_norm(astype(x, stats_dtype(scale)), value_of(scale), epsilon), *dtype);
}

}  // namespace nnx
