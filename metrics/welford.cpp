// Welford: the batch's count, mean and squared deviations (two reductions), merged into the
// running ones.
#include <nnx/metrics/welford.h>

#include <nnx/metrics/detail/reduce.h>
#include <nnx/sharding/ops.h>

#include <ATen/ATen.h>

#include <cmath>

namespace nnx::metrics {

void Welford::update(const MetricInputs& inputs) {
  const Array& values = detail::input(inputs, argname_, "Welford");
  auto mask = detail::mask_of(inputs);
  auto [sum, count] = detail::masked_sum_and_count(values, mask);
  if (count == 0) return;
  const double batch_mean = sum / count;
  Array x = detail::as_float64(values);
  Array deviation = x.with_local(x.local() - batch_mean);
  auto [batch_m2, _] = detail::masked_sum_and_count(square(deviation), mask);
  const double total = count_ + count;
  const double delta = batch_mean - mean_;
  mean_ += delta * count / total;
  m2_ += batch_m2 + delta * delta * count * count_ / total;
  count_ = total;
}

Statistics Welford::compute() const {
  const double variance = m2_ / count_;
  const double deviation = std::sqrt(variance);
  return {.mean = mean_, .standard_error_of_mean = deviation / std::sqrt(count_),
          .standard_deviation = deviation};
}

std::map<std::string, double> Welford::results() const {
  Statistics s = compute();
  return {{"mean", s.mean}, {"standard_error_of_mean", s.standard_error_of_mean},
          {"standard_deviation", s.standard_deviation}};
}

}  // namespace nnx::metrics
