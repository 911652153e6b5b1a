// nnx::BatchNorm, as flax.nnx.BatchNorm over the last (feature) dim: batch statistics in
// training (biased variance, Flax's fast form), running averages mean/var (BatchStat, float32)
// updated as m * running + (1 - m) * batch, and the running averages in eval().
#pragma once

#include <nnx/framework/initializers.h>
#include <nnx/framework/module.h>
#include <nnx/framework/rngs.h>

#include <optional>

namespace nnx {

struct BatchNormOptions {
  bool use_running_average = false;  // true: always normalize with the running averages
  double momentum = 0.99;
  double epsilon = 1e-5;
  bool use_bias = true;
  bool use_scale = true;
  at::ScalarType param_dtype = at::kFloat;
  Initializer scale_init = initializers::ones();
  Initializer bias_init = initializers::zeros();
  Metadata scale_metadata = {};  // mean and var follow scale's out_sharding
  Metadata bias_metadata = {};
};

class BatchNorm : public Module {
 public:
  BatchNorm(int64_t num_features, Rngs& rngs, BatchNormOptions options = {});
  // A temporary Rngs (Flax's rngs=nnx.Rngs(0)): its keys are drawn, then it is dropped.
  BatchNorm(int64_t num_features, Rngs&& rngs, BatchNormOptions options = {})
      : BatchNorm(num_features, rngs, std::move(options)) {}

  // x [..., num_features]; statistics over every other dim. In training (and unless
  // use_running_average) it updates mean and var.
  Array operator()(const Array& x);

  BatchStat NNX_FIELD(mean);
  BatchStat NNX_FIELD(var);
  std::optional<Param> NNX_FIELD(scale);
  std::optional<Param> NNX_FIELD(bias);
  bool use_running_average = false;
  double momentum = 0.99;
  double epsilon = 1e-5;
};

}  // namespace nnx
