// Sums through nnx::sum and gather, so replicas along unused mesh axes are not counted twice.
#include <nnx/metrics/detail/reduce.h>

#include <nnx/core/error.h>
#include <nnx/sharding/ops.h>
#include <nnx/sharding/redistribute.h>

#include <ATen/ATen.h>

namespace nnx::metrics::detail {

const Array& input(const MetricInputs& inputs, const std::string& name, const char* metric) {
  auto it = inputs.find(name);
  if (it == inputs.end()) {
    std::vector<std::string> given;
    for (const auto& [n, _] : inputs) given.push_back(n);
    NNX_FAIL("{} needs the input '{}', given {{{}}}; pass it as {{\"{}\", array}}", metric, name,
             fmt::join(given, ", "), name);
  }
  NNX_CHECK(it->second.defined() && !it->second.is_abstract(),
            "{}: the input '{}' holds no values", metric, name);
  return it->second;
}

std::optional<Array> mask_of(const MetricInputs& inputs) {
  auto it = inputs.find("mask");
  if (it == inputs.end()) return std::nullopt;
  return it->second;
}

Array as_float64(const Array& x) {
  Array whole = x;
  if (x.mesh() && !x.partial_axes().empty()) whole = redistribute(x, x.spec());
  return whole.with_local(whole.local().to(at::kDouble));
}

double global_sum(const Array& x) {
  Array total = sum(as_float64(x));
  return (total.mesh() ? gather(total) : total.local()).item<double>();
}

std::pair<double, double> masked_sum_and_count(const Array& values,
                                               const std::optional<Array>& mask) {
  if (!mask) return {global_sum(values), static_cast<double>(values.numel())};
  NNX_CHECK(values.ndim() > 0, "a mask needs array values, not a scalar (as in Flax)");
  NNX_CHECK(mask->ndim() <= values.ndim() &&
                std::equal(mask->shape().begin(), mask->shape().end(), values.shape().begin()),
            "the mask {} must match the leading dims of the values {}", to_string(mask->shape()),
            to_string(values.shape()));
  Array m = as_float64(*mask);
  Shape expanded = m.shape();
  while (expanded.size() < values.shape().size()) expanded.push_back(1);
  const double per_mask_element = static_cast<double>(values.numel()) / m.numel();
  Array weighted = as_float64(values) * reshape(m, expanded);
  return {global_sum(weighted), global_sum(m) * per_mask_element};
}

}  // namespace nnx::metrics::detail
