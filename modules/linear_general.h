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
  // x [..., in dims...] -> [..., out dims...].
  Array operator()(const Array& x) const;

  Param NNX_FIELD(kernel);
  std::optional<Param> NNX_FIELD(bias);
  int64_t in_dims = 1;
  std::optional<at::ScalarType> dtype;
};

}  // namespace nnx
