// Metric::state and load_state over each metric's named accumulators.
#include <nnx/metrics/metric.h>

#include <nnx/core/error.h>

#include <ATen/ATen.h>

namespace nnx::metrics {

State Metric::state() const {
  State out;
  for (const auto& [name, value] : const_cast<Metric*>(this)->accumulators())
    out.add(name, MetricState(Array(at::scalar_tensor(*value, at::kDouble))));
  return out;
}

void Metric::load_state(const State& state) {
  auto slots = accumulators();
  std::vector<double> values;
  for (const auto& [name, _] : slots) {
    NNX_CHECK(state.contains(name), "the metric state has no '{}'; was it saved by state()?", name);
    const Array& a = state.at(name).value();
    NNX_CHECK(a.defined() && !a.is_abstract() && a.numel() == 1,
              "the metric state's '{}' is not a scalar with a value", name);
    values.push_back(a.local().item<double>());
  }
  for (size_t i = 0; i < slots.size(); ++i) *slots[i].second = values[i];
}

}  // namespace nnx::metrics
