// Average: float64 running total and count.
#include <nnx/metrics/average.h>

#include <nnx/metrics/detail/reduce.h>

namespace nnx::metrics {

void Average::update(const MetricInputs& inputs) {
  update_values(detail::input(inputs, argname_, "Average"), detail::mask_of(inputs));
}

void Average::update_values(const Array& values, const std::optional<Array>& mask) {
  auto [sum, count] = detail::masked_sum_and_count(values, mask);
  total_ += sum;
  count_ += count;
}

}  // namespace nnx::metrics
