// Normalization layers.
#include <nnx/modules/normalization.h>
#include <nnx/sharding/ops.h>

namespace nnx {

namespace {
std::optional<Array> value_of(const std::optional<Param>& p) {
  if (!p) return std::nullopt;
  return p->value();
}
}  // namespace

LayerNorm::LayerNorm(int64_t num_features, Rngs& rngs, NormOptions options)
    : epsilon(options.epsilon) {
  if (options.use_scale)
    scale = Param(initializers::ones()(rngs.params(), {num_features}, options.param_dtype),
                  options.scale_metadata);
  if (options.use_bias)
    bias = Param(initializers::zeros()(rngs.params(), {num_features}, options.param_dtype),
                 options.bias_metadata);
}

Array LayerNorm::operator()(const Array& x) const {
  return layer_norm(x, value_of(scale), value_of(bias), epsilon);
}

RMSNorm::RMSNorm(int64_t num_features, Rngs& rngs, NormOptions options) : epsilon(options.epsilon) {
  if (options.use_scale)
    scale = Param(initializers::ones()(rngs.params(), {num_features}, options.param_dtype),
                  options.scale_metadata);
}

Array RMSNorm::operator()(const Array& x) const { return rms_norm(x, value_of(scale), epsilon); }

}  // namespace nnx
