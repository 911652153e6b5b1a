// Batch normalization.
#include <nnx/core/error.h>
#include <nnx/modules/batch_norm.h>
#include <nnx/modules/detail/checked_size.h>
#include <nnx/modules/detail/compute_dtype.h>
#include <nnx/sharding/astype.h>
#include <nnx/sharding/ops.h>
#include <nnx/sharding/redistribute.h>

#include <torch/types.h>

namespace nnx {

namespace {

Metadata stats_metadata(const Metadata& scale) {
  Metadata md;
  md.out_sharding = scale.out_sharding;
  md.sharding_rules = scale.sharding_rules;
  return md;
}

// m * running + (1 - m) * batch, laid out as the running value and cut from autograd.
Array running_update(const Array& running, const Array& batch, double m) {
  Array next = running * m + batch * (1 - m);
  if (running.mesh()) next = redistribute(next, running.spec());
  return next.with_local(next.local().detach().to(running.dtype()));
}

}  // namespace

BatchNorm::BatchNorm(int64_t num_features, Rngs& rngs, BatchNormOptions options)
    : mean(torch::zeros({detail::checked_size(num_features, "BatchNorm", "num_features")}),
           stats_metadata(options.scale_metadata)),
      var(torch::ones({num_features}), stats_metadata(options.scale_metadata)),
      use_running_average(options.use_running_average),
      momentum(options.momentum),
      epsilon(options.epsilon) {
  if (options.use_scale)
    scale = Param(options.scale_init(rngs.params(), {num_features}, options.param_dtype),
                  options.scale_metadata);
  if (options.use_bias)
    bias = Param(options.bias_init(rngs.params(), {num_features}, options.param_dtype),
                 options.bias_metadata);
}

Array BatchNorm::operator()(const Array& x) {
  NNX_CHECK(x.ndim() >= 1 && x.shape().back() == mean.shape()[0],
            "input {} does not end in the {} features this BatchNorm normalizes",
            to_string(x.shape()), mean.shape()[0]);
  // Statistics in float32 at least, as Flax takes them; the output in the type of x, scale and
  // bias together.
  const at::ScalarType out = detail::compute_dtype(
      std::nullopt, {&x, scale ? &scale->value() : nullptr, bias ? &bias->value() : nullptr});
  const bool narrow = x.dtype() == at::kBFloat16 || x.dtype() == at::kHalf;
  const Array xs = narrow ? astype(x, at::kFloat) : x;
  Array mu, variance;
  if (use_running_average || !is_training()) {
    mu = mean.value();
    variance = var.value();
  } else {
    NNX_CHECK(x.ndim() >= 2, "BatchNorm takes its statistics over the dims before the features, "
              "and input {} has none; give it a batch dim ([1, {}]) or use the running averages",
              to_string(x.shape()), mean.shape()[0]);
    std::vector<int64_t> dims;
    for (int64_t d = 0; d + 1 < x.ndim(); ++d) dims.push_back(d);
    mu = nnx::mean(xs, dims);
    // Flax's fast variance: E[x^2] - E[x]^2, floored at 0.
    variance = relu(nnx::mean(square(xs), dims) - square(mu));
    mean.set_value(running_update(mean.value(), mu, momentum));
    var.set_value(running_update(var.value(), variance, momentum));
  }
  Array multiplier = rsqrt(variance + epsilon);
  if (scale) multiplier = multiplier * scale->value();
  Array y = (xs - mu) * multiplier;
  return astype(bias ? y + bias->value() : y, out);
}

}  // namespace nnx
