// Sums through nnx::sum and gather, so replicas along unused mesh axes are not counted twice.
#include <nnx/metrics/detail/reduce.h>

#include <nnx/core/error.h>
#include <nnx/sharding/ops.h>
#include <nnx/sharding/redistribute.h>
#include <nnx/sharding/spec_check.h>

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
  NNX_CHECK(it->second.defined() && !it->second.is_abstract(),
            "the input 'mask' holds no values; pass a mask of 0 and 1 per row, or none");
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

namespace {

// The mask [leading dims of values, then 1s] laid out as the values' leading dims, so that its
// local block lines up with (broadcasts against) the values' local block.
Array aligned_mask(const Array& mask, const Array& values) {
  if (!values.mesh()) return mask.mesh() ? Array(gather(mask)) : mask;
  const PartitionSpec own = pad_spec(values.spec(), values.shape().size());
  std::vector<SpecEntry> entries(own.entries().begin(), own.entries().end());
  for (size_t d = 0; d < entries.size(); ++d)
    if (mask.shape()[d] == 1 && values.shape()[d] != 1) entries[d] = none;
  const PartitionSpec spec(entries);
  if (!mask.mesh()) return device_put(mask.local(), {values.mesh(), spec});
  NNX_CHECK(*mask.mesh() == *values.mesh(), "the mask lies on {} but the values on {}; put both "
            "on one mesh", mask.mesh()->to_string(), values.mesh()->to_string());
  return redistribute(mask, spec);
}

}  // namespace

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
  // Values per mask element; an empty mask covers nothing (not 0 / 0).
  const double per_mask_element =
      m.numel() == 0 ? 0.0 : static_cast<double>(values.numel()) / m.numel();
  Array v = as_float64(values);
  Array weights = aligned_mask(reshape(m, expanded), v);
  // where(mask, values, 0) * mask: a masked-out NaN or inf (a padded row) counts as 0, not NaN.
  at::Tensor kept = at::where(weights.local() != 0, v.local(), at::zeros({}, v.local().options()));
  Array weighted = v.with_local(kept * weights.local());
  return {global_sum(weighted), global_sum(m) * per_mask_element};
}

}  // namespace nnx::metrics::detail
