// jax.nn.initializers formulas over nnx::random's block samplers: values are computed in
// float32 as JAX does, then cast to the requested dtype.
#include <nnx/core/error.h>
#include <nnx/framework/initializers.h>

#include <ATen/ATen.h>

#include <cmath>

namespace nnx::initializers {

namespace {

// The float32 block `samples` times s (a float32 product, as JAX), cast to dtype.
at::Tensor scaled(at::Tensor samples, float s, at::ScalarType dtype) {
  samples.mul_(s);  // a float32 tensor times a float32 value: float32 products
  return dtype == at::kFloat ? samples : samples.to(dtype);
}

// float32 samples of `block`, on the device sharded initialization samples on (if any).
random::Sample float_block(const Box& block) {
  return {.dtype = at::kFloat, .block = block, .device = random::sampling_device()};
}

// An initializer with only `fn` set (no metadata).
Initializer from_fn(Initializer::Fn fn) {
  Initializer init;
  init.fn = std::move(fn);
  return init;
}

Initializer filled(double value, const char* who) {
  return from_fn([value, who](const random::Key&, const Shape& shape, at::ScalarType dtype,
                              const Box& block) {
    check_box_inside(block, shape, who);
    return at::full(block.size, value,
                    at::TensorOptions().dtype(dtype).device(
                        random::sampling_device().value_or(at::kCPU)));
  });
}

// An axis list resolved against `shape`: negative axes count from the end.
int64_t axes_size(const std::vector<int64_t>& axes, const Shape& shape, const char* name,
                  const char* who) {
  const auto rank = static_cast<int64_t>(shape.size());
  int64_t size = 1;
  for (int64_t axis : axes) {
    const int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank)
      detail::throw_error(who, fmt::format("{} {} is out of range for shape {} of rank {}; "
                                           "pass axes in [-{}, {})",
                                           name, axis, to_string(shape), rank, rank, rank));
    size *= shape[a];
  }
  return size;
}

Fans fans_of(const Shape& shape, const VarianceScalingAxes& axes, const char* who) {
  if (shape.size() < 2)
    detail::throw_error(who, fmt::format("cannot compute fans of shape {}: it has rank {}, "
                                         "variance scaling needs at least 2 dims (use zeros or "
                                         "normal for biases)",
                                         to_string(shape), shape.size()));
  const double in_size = axes_size(axes.in_axis, shape, "in_axis", who);
  const double out_size = axes_size(axes.out_axis, shape, "out_axis", who);
  const double batch_size = axes_size(axes.batch_axis, shape, "batch_axis", who);
  const double receptive = static_cast<double>(numel(shape)) / in_size / out_size / batch_size;
  return {.fan_in = in_size * receptive, .fan_out = out_size * receptive};
}

}  // namespace

Initializer zeros() { return filled(0.0, "zeros"); }
Initializer ones() { return filled(1.0, "ones"); }
Initializer constant(double value) { return filled(value, "constant"); }

Initializer normal(double stddev) {
  return from_fn([stddev](const random::Key& key, const Shape& shape, at::ScalarType dtype,
                          const Box& block) {
    detail::check_floating(dtype, "normal");
    return scaled(random::normal(key, shape, float_block(block)), static_cast<float>(stddev),
                  dtype);
  });
}

Initializer uniform(double scale) {
  return from_fn([scale](const random::Key& key, const Shape& shape, at::ScalarType dtype,
                         const Box& block) {
    detail::check_floating(dtype, "uniform");
    return scaled(random::uniform(key, shape, 0, 1, float_block(block)),
                  static_cast<float>(scale), dtype);
  });
}

Initializer truncated_normal(double stddev, double lower, double upper) {
  NNX_CHECK(lower < upper, "lower {} must be below upper {}", lower, upper);
  return from_fn([=](const random::Key& key, const Shape& shape, at::ScalarType dtype,
                     const Box& block) {
    detail::check_floating(dtype, "truncated_normal");
    return scaled(random::truncated_normal(key, lower, upper, shape, float_block(block)),
                  static_cast<float>(stddev), dtype);
  });
}

Fans compute_fans(const Shape& shape, const VarianceScalingAxes& axes) {
  return fans_of(shape, axes, "compute_fans");
}

Initializer variance_scaling(double scale, FanMode mode, Distribution distribution,
                             VarianceScalingAxes axes) {
  NNX_CHECK(scale >= 0, "scale {} must be >= 0 (it is a variance multiplier)", scale);
  return from_fn([=](const random::Key& key, const Shape& shape, at::ScalarType dtype,
                     const Box& block) {
    const char* who = "variance_scaling";
    detail::check_floating(dtype, who);
    check_box_inside(block, shape, who);
    const Fans fans = fans_of(shape, axes, who);
    double denominator = 0;
    switch (mode) {
      case FanMode::fan_in: denominator = fans.fan_in; break;
      case FanMode::fan_out: denominator = fans.fan_out; break;
      case FanMode::fan_avg: denominator = (fans.fan_in + fans.fan_out) / 2; break;
      case FanMode::fan_geo_avg: denominator = std::sqrt(fans.fan_in * fans.fan_out); break;
    }
    // JAX holds the variance in the array dtype (float32) before taking roots.
    const float variance = static_cast<float>(scale / denominator);
    switch (distribution) {
      case Distribution::truncated_normal: {
        // 0.8796... is the stddev of a standard normal truncated to (-2, 2).
        const float stddev = std::sqrt(variance) / static_cast<float>(0.87962566103423978);
        return scaled(random::truncated_normal(key, -2, 2, shape, float_block(block)), stddev,
                      dtype);
      }
      case Distribution::normal:
        return scaled(random::normal(key, shape, float_block(block)), std::sqrt(variance),
                      dtype);
      case Distribution::uniform:
        return scaled(random::uniform(key, shape, -1, 1, float_block(block)),
                      std::sqrt(3.0f * variance), dtype);
    }
    detail::throw_error(who, "unknown distribution");
  });
}

Initializer lecun_normal(VarianceScalingAxes axes) {
  return variance_scaling(1, FanMode::fan_in, Distribution::truncated_normal, std::move(axes));
}
Initializer lecun_uniform(VarianceScalingAxes axes) {
  return variance_scaling(1, FanMode::fan_in, Distribution::uniform, std::move(axes));
}
Initializer glorot_normal(VarianceScalingAxes axes) {
  return variance_scaling(1, FanMode::fan_avg, Distribution::truncated_normal, std::move(axes));
}
Initializer glorot_uniform(VarianceScalingAxes axes) {
  return variance_scaling(1, FanMode::fan_avg, Distribution::uniform, std::move(axes));
}
Initializer he_normal(VarianceScalingAxes axes) {
  return variance_scaling(2, FanMode::fan_in, Distribution::truncated_normal, std::move(axes));
}
Initializer he_uniform(VarianceScalingAxes axes) {
  return variance_scaling(2, FanMode::fan_in, Distribution::uniform, std::move(axes));
}

}  // namespace nnx::initializers
