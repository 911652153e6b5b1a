// nnx::Linear, as flax.nnx.Linear: kernel [in, out] (lecun_normal) then bias [out] (zeros),
// drawing the kernel key then the bias key from rngs.params(), so Rngs(0) gives Flax's values
// (float32 parameters; see initializers.h for 16-bit ones).
#pragma once

#include <nnx/framework/initializers.h>
#include <nnx/framework/module.h>
#include <nnx/framework/rngs.h>

#include <optional>

namespace nnx {

struct LinearOptions {
  bool use_bias = true;
  // Compute dtype (Flax's `dtype`): inputs and parameters are cast to it; none computes in theirs.
  std::optional<at::ScalarType> dtype;
  at::ScalarType param_dtype = at::kFloat;
  Initializer kernel_init = initializers::lecun_normal();
  Initializer bias_init = initializers::zeros();
  Metadata kernel_metadata = {};  // e.g. {.out_sharding = P("embed", "mlp")}
  Metadata bias_metadata = {};
};

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, Rngs& rngs, LinearOptions options = {});
  // A temporary Rngs (Flax's rngs=nnx.Rngs(0)): its keys are drawn, then it is dropped.
  Linear(int64_t in_features, int64_t out_features, Rngs&& rngs, LinearOptions options = {})
      : Linear(in_features, out_features, rngs, std::move(options)) {}

  Array operator()(const Array& x) const;

  Param NNX_FIELD(kernel);
  std::optional<Param> NNX_FIELD(bias);
  std::optional<at::ScalarType> dtype;
};

}  // namespace nnx
