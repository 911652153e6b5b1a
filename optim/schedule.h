// Learning-rate schedules with optax's formulas: a Schedule maps a step count to a value.
#pragma once

#include <cstdint>
#include <functional>
#include <map>

namespace nnx::optim {

using Schedule = std::function<double(int64_t step)>;

Schedule constant_schedule(double value);
// optax.linear_schedule: from init to end over transition_steps, starting at transition_begin.
Schedule linear_schedule(double init_value, double end_value, int64_t transition_steps,
                         int64_t transition_begin = 0);
// optax.cosine_decay_schedule.
Schedule cosine_decay_schedule(double init_value, int64_t decay_steps, double alpha = 0,
                               double exponent = 1);
// optax.warmup_cosine_decay_schedule: linear warmup to peak, then cosine decay to end_value
// (decay_steps counts the warmup, as optax).
Schedule warmup_cosine_decay_schedule(double init_value, double peak_value, int64_t warmup_steps,
                                      int64_t decay_steps, double end_value = 0,
                                      double exponent = 1);
// optax.piecewise_constant_schedule: the value is multiplied by scale from each boundary on.
Schedule piecewise_constant_schedule(double init_value,
                                     const std::map<int64_t, double>& boundaries_and_scales);

}  // namespace nnx::optim
