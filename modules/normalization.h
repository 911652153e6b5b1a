// LayerNorm and RMSNorm over the last dim, as flax.nnx (epsilon 1e-6, scale ones, bias zeros,
// scale key then bias key from rngs.params()).
#pragma once

#include <nnx/framework/initializers.h>
#include <nnx/framework/module.h>
#include <nnx/framework/rngs.h>

#include <optional>

namespace nnx {

struct NormOptions {
  double epsilon = 1e-6;
  bool use_scale = true;
  bool use_bias = true;  // LayerNorm only
  // Output dtype (Flax's `dtype`): the statistics are computed in float32 either way.
  std::optional<at::ScalarType> dtype;
  at::ScalarType param_dtype = at::kFloat;
  Metadata scale_metadata = {};
  Metadata bias_metadata = {};
};

class LayerNorm : public Module {
 public:
  LayerNorm(int64_t num_features, Rngs& rngs, NormOptions options = {});
  // A temporary Rngs (Flax's rngs=nnx.Rngs(0)): its keys are drawn, then it is dropped.
  LayerNorm(int64_t num_features, Rngs&& rngs, NormOptions options = {})
      : LayerNorm(num_features, rngs, std::move(options)) {}
  Array operator()(const Array& x) const;

  std::optional<Param> NNX_FIELD(scale);
  std::optional<Param> NNX_FIELD(bias);
  double epsilon = 1e-6;
  std::optional<at::ScalarType> dtype;
};

class RMSNorm : public Module {
 public:
  RMSNorm(int64_t num_features, Rngs& rngs, NormOptions options = {});
  // A temporary Rngs (Flax's rngs=nnx.Rngs(0)): its keys are drawn, then it is dropped.
  RMSNorm(int64_t num_features, Rngs&& rngs, NormOptions options = {})
      : RMSNorm(num_features, rngs, std::move(options)) {}
  Array operator()(const Array& x) const;

  std::optional<Param> NNX_FIELD(scale);
  double epsilon = 1e-6;
  std::optional<at::ScalarType> dtype;
};

}  // namespace nnx
