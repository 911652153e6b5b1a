// nnx::Conv, as flax.nnx.Conv for 2-d: kernel [kh, kw, in, out] (lecun_normal, fan_in =
// kh*kw*in) then bias [out] (zeros), kernel key then bias key; inputs NHWC, padding "SAME".
#pragma once

#include <nnx/framework/initializers.h>
#include <nnx/framework/module.h>
#include <nnx/framework/rngs.h>

#include <array>
#include <optional>
#include <string>

namespace nnx {

struct ConvOptions {
  std::array<int64_t, 2> strides = {1, 1};
  std::string padding = "SAME";  // or "VALID"
  bool use_bias = true;
  // Compute dtype (Flax's `dtype`): inputs and parameters are cast to it; none promotes them.
  std::optional<at::ScalarType> dtype;
  at::ScalarType param_dtype = at::kFloat;
  Initializer kernel_init = initializers::lecun_normal();
  Initializer bias_init = initializers::zeros();
  Metadata kernel_metadata = {};  // e.g. {.out_sharding = P(none, none, none, "model")}
  Metadata bias_metadata = {};
};

class Conv : public Module {
 public:
  Conv(int64_t in_features, int64_t out_features, std::array<int64_t, 2> kernel_size, Rngs& rngs,
       ConvOptions options = {});
  // A temporary Rngs (Flax's rngs=nnx.Rngs(0)): its keys are drawn, then it is dropped.
  Conv(int64_t in_features, int64_t out_features, std::array<int64_t, 2> kernel_size, Rngs&& rngs,
       ConvOptions options = {})
      : Conv(in_features, out_features, kernel_size, rngs, std::move(options)) {}

  // x [batch, height, width, in_features] -> [batch, height', width', out_features]; as in Flax,
  // any number of batch dims, or none for one example.
  Array operator()(const Array& x) const;

  Param NNX_FIELD(kernel);
  std::optional<Param> NNX_FIELD(bias);
  std::array<int64_t, 2> strides = {1, 1};
  std::string padding = "SAME";
  std::optional<at::ScalarType> dtype;
};

}  // namespace nnx
