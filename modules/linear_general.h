// nnx::LinearGeneral, as flax.nnx.LinearGeneral over trailing axes: kernel
// [in dims..., out dims...] (the kernel initializer sees the flattened [in, out] matrix, as
// Flax's), then bias [out dims...], keys drawn kernel then bias from rngs.params().
#pragma once

#include <nnx/modules/linear.h>

#include <optional>

namespace nnx {

// The same options as Linear's (use_bias, param_dtype, initializers, metadata).
using LinearGeneralOptions = LinearOptions;

class LinearGeneral : public Module {
 public:
  LinearGeneral(Shape in_features, Shape out_features, Rngs& rngs,
                LinearGeneralOptions options = {});
  // A temporary Rngs (Flax's rngs=nnx.Rngs(0)): its keys are drawn, then it is dropped.
  LinearGeneral(Shape in_features, Shape out_features, Rngs&& rngs,
                LinearGeneralOptions options = {})
      : LinearGeneral(std::move(in_features), std::move(out_features), rngs,
                      std::move(options)) {}
  // x [..., in dims...] -> [..., out dims...].
  Array operator()(const Array& x) const;

  Param NNX_FIELD(kernel);
  std::optional<Param> NNX_FIELD(bias);
  int64_t in_dims = 1;
  std::optional<at::ScalarType> dtype;
};

}  // namespace nnx
