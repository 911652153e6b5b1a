// Multi-layer perceptron.
#include <nnx/core/error.h>
#include <nnx/modules/mlp.h>
#include <nnx/sharding/ops.h>

namespace nnx {

MLP::MLP(std::vector<int64_t> features, Rngs& rngs, MLPOptions options)
    : activation(std::move(options.activation)) {
  const size_t n = features.size() < 2 ? 0 : features.size() - 1;
  NNX_CHECK(n >= 1, "needs the input width and at least one layer width, got {} entries",
            features.size());
  for (const auto* list : {&options.kernel_metadata, &options.bias_metadata})
    NNX_CHECK(list->empty() || list->size() == n,
              "per-layer metadata has {} entries for {} layers; give one per layer or none",
              list->size(), n);
  NNX_CHECK(activation, "activation is empty; pass a function such as nnx::relu");
  layers.reserve(n);
  for (size_t i = 0; i < n; ++i)
    layers.emplace_back(
        features[i], features[i + 1], rngs,
        LinearOptions{.use_bias = options.use_bias,
                      .dtype = options.dtype,
                      .param_dtype = options.param_dtype,
                      .kernel_init = options.kernel_init,
                      .bias_init = options.bias_init,
                      .kernel_metadata = options.kernel_metadata.empty() ? Metadata{}
                                                                         : options.kernel_metadata[i],
                      .bias_metadata = options.bias_metadata.empty() ? Metadata{}
                                                                     : options.bias_metadata[i]});
}

Array MLP::operator()(const Array& x) const {
  Array y = x;
  for (size_t i = 0; i < layers.size(); ++i) {
    y = layers[i](y);
    if (i + 1 < layers.size()) y = activation(y);
  }
  return y;
}

}  // namespace nnx
