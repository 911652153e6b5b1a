// Schedules.
#include <nnx/core/error.h>
#include <nnx/optim/schedule.h>

#include <algorithm>
#include <cmath>
#include <numbers>

namespace nnx::optim {

Schedule constant_schedule(double value) {
  return [value](int64_t) { return value; };
}

Schedule linear_schedule(double init_value, double end_value, int64_t transition_steps,
                         int64_t transition_begin) {
  NNX_CHECK(transition_steps > 0, "transition_steps must be positive, got {}", transition_steps);
  return [=](int64_t step) {
    double count = static_cast<double>(std::clamp<int64_t>(step - transition_begin, 0, transition_steps));
    double frac = 1.0 - count / static_cast<double>(transition_steps);
    return (init_value - end_value) * frac + end_value;
  };
}

Schedule cosine_decay_schedule(double init_value, int64_t decay_steps, double alpha,
                               double exponent) {
  NNX_CHECK(decay_steps > 0, "decay_steps must be positive, got {}", decay_steps);
  return [=](int64_t step) {
    double count = static_cast<double>(std::min(step, decay_steps));
    double cosine = 0.5 * (1 + std::cos(std::numbers::pi * count / static_cast<double>(decay_steps)));
    return init_value * ((1 - alpha) * std::pow(cosine, exponent) + alpha);
  };
}

Schedule warmup_cosine_decay_schedule(double init_value, double peak_value, int64_t warmup_steps,
                                      int64_t decay_steps, double end_value, double exponent) {
  NNX_CHECK(decay_steps > warmup_steps, "decay_steps ({}) must exceed warmup_steps ({})",
            decay_steps, warmup_steps);
  auto warmup = warmup_steps > 0 ? linear_schedule(init_value, peak_value, warmup_steps)
                                 : constant_schedule(peak_value);
  auto decay = cosine_decay_schedule(peak_value, decay_steps - warmup_steps,
                                     peak_value != 0 ? end_value / peak_value : 0, exponent);
  return [=](int64_t step) { return step < warmup_steps ? warmup(step) : decay(step - warmup_steps); };
}

Schedule piecewise_constant_schedule(double init_value,
                                     const std::map<int64_t, double>& boundaries_and_scales) {
  // As optax: a negative scale would turn descent into ascent from its boundary on.
  for (const auto& [boundary, scale] : boundaries_and_scales)
    NNX_CHECK(scale >= 0, "piecewise_constant_schedule's scale at boundary {} is {}; scales must "
              "not be negative (nor NaN)", boundary, scale);
  return [=](int64_t step) {
    double v = init_value;
    for (const auto& [boundary, scale] : boundaries_and_scales)
      if (step >= boundary) v *= scale;
    return v;
  };
}

}  // namespace nnx::optim
