// Reductions the metrics share: sums over every element of a (possibly sharded) array, in
// float64, each global element counted once, the result on every process.
#pragma once

#include <nnx/metrics/metric.h>

#include <optional>
#include <string>

namespace nnx::metrics::detail {

// inputs[name], or an error naming the metric, the missing input and those given.
const Array& input(const MetricInputs& inputs, const std::string& name, const char* metric);
// inputs["mask"] when given.
std::optional<Array> mask_of(const MetricInputs& inputs);
// x as float64, its pending sums resolved, on the same layout.
Array as_float64(const Array& x);
// The sum of all of x's elements (collective over x's mesh).
double global_sum(const Array& x);
// The sum of values * mask and of the mask (broadcast over the values' trailing dims); without a
// mask, the sum and the element count.
std::pair<double, double> masked_sum_and_count(const Array& values,
                                               const std::optional<Array>& mask);

}  // namespace nnx::metrics::detail
