// jax.nn.initializers in C++: constants, normal/uniform/truncated_normal and variance scaling
// (lecun, glorot/xavier, he/kaiming). Each returns any block of the array, equal to that slice
// of the whole; fans always come from the global shape. Samples are drawn in float32, JAX's for
// float32 arrays; 16-bit arrays get them rounded, where JAX draws 16-bit samples of its own (same
// distribution, other values).
#pragma once

#include <nnx/framework/initializer.h>

#include <cstdint>
#include <vector>

namespace nnx::initializers {

Initializer zeros();
Initializer ones();
Initializer constant(double value);
// stddev * normal, scale * uniform[0, 1), stddev * truncated_normal(lower, upper).
Initializer normal(double stddev = 1e-2);
Initializer uniform(double scale = 1e-2);
Initializer truncated_normal(double stddev = 1e-2, double lower = -2, double upper = 2);

enum class FanMode { fan_in, fan_out, fan_avg, fan_geo_avg };
enum class Distribution { truncated_normal, normal, uniform };

// Which dims are inputs, outputs and batch; negative axes count from the end.
struct VarianceScalingAxes {
  std::vector<int64_t> in_axis{-2};
  std::vector<int64_t> out_axis{-1};
  std::vector<int64_t> batch_axis{};
};

// JAX's _compute_fans: receptive = numel / in_size / out_size / batch_size,
// fan_in = in_size * receptive, fan_out = out_size * receptive. Needs rank >= 2.
struct Fans {
  double fan_in = 0;
  double fan_out = 0;
};
Fans compute_fans(const Shape& shape, const VarianceScalingAxes& axes = {});

// jax.nn.initializers.variance_scaling: variance = scale / fan (per mode), drawn from a
// truncated normal (rescaled to that variance), a normal or a uniform.
Initializer variance_scaling(double scale, FanMode mode, Distribution distribution,
                             VarianceScalingAxes axes = {});

Initializer lecun_normal(VarianceScalingAxes axes = {});   // (1, fan_in, truncated_normal)
Initializer lecun_uniform(VarianceScalingAxes axes = {});  // (1, fan_in, uniform)
Initializer glorot_normal(VarianceScalingAxes axes = {});  // (1, fan_avg, truncated_normal)
Initializer glorot_uniform(VarianceScalingAxes axes = {}); // (1, fan_avg, uniform)
Initializer he_normal(VarianceScalingAxes axes = {});      // (2, fan_in, truncated_normal)
Initializer he_uniform(VarianceScalingAxes axes = {});     // (2, fan_in, uniform)

inline Initializer xavier_normal(VarianceScalingAxes axes = {}) { return glorot_normal(axes); }
inline Initializer xavier_uniform(VarianceScalingAxes axes = {}) { return glorot_uniform(axes); }
inline Initializer kaiming_normal(VarianceScalingAxes axes = {}) { return he_normal(axes); }
inline Initializer kaiming_uniform(VarianceScalingAxes axes = {}) { return he_uniform(axes); }

}  // namespace nnx::initializers
