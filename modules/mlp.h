// nnx::MLP: Linear layers of the given widths with an activation between them (none after the
// last). Per-layer metadata shards it, e.g. Megatron style for two layers:
//   nnx::MLP mlp({512, 2048, 512}, rngs, {.kernel_metadata = {{.out_sharding = P("embed", "mlp")},
//                                                             {.out_sharding = P("mlp", "embed")}}});
#pragma once

#include <nnx/framework/module.h>
#include <nnx/framework/rngs.h>
#include <nnx/modules/linear.h>
#include <nnx/sharding/ops.h>

#include <functional>
#include <vector>

namespace nnx {

struct MLPOptions {
  std::function<Array(const Array&)> activation = [](const Array& x) { return relu(x); };
  bool use_bias = true;
  // Compute dtype (Flax's `dtype`): inputs and parameters are cast to it; none computes in theirs.
  std::optional<at::ScalarType> dtype;
  at::ScalarType param_dtype = at::kFloat;
  Initializer kernel_init = initializers::lecun_normal();
  Initializer bias_init = initializers::zeros();
  std::vector<Metadata> kernel_metadata = {};  // one per layer, or empty
  std::vector<Metadata> bias_metadata = {};    // one per layer, or empty
};

class MLP : public Module {
 public:
  // features: input width, then each layer's output width (at least two entries).
  MLP(std::vector<int64_t> features, Rngs& rngs, MLPOptions options = {});
  // A temporary Rngs (Flax's rngs=nnx.Rngs(0)): its keys are drawn, then it is dropped.
  MLP(std::vector<int64_t> features, Rngs&& rngs, MLPOptions options = {})
      : MLP(std::move(features), rngs, std::move(options)) {}
  Array operator()(const Array& x) const;

  std::vector<Linear> NNX_FIELD(layers);
  std::function<Array(const Array&)> activation;
};

}  // namespace nnx
