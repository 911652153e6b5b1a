// MultiMetric: updates in the order given, so every process runs the same collectives.
#include <nnx/metrics/multi_metric.h>

#include <nnx/core/error.h>

#include <set>

namespace nnx::metrics {

MultiMetric::MultiMetric(std::initializer_list<Entry> metrics) : metrics_(metrics) {
  std::set<std::string> seen;
  for (const auto& e : metrics_)
    NNX_CHECK(seen.insert(e.name).second, "MultiMetric: the name '{}' is used twice", e.name);
}

MultiMetric::MultiMetric(const MultiMetric& other) : metrics_(other.metrics_) {}

void MultiMetric::reset() {
  for (auto& e : metrics_) e.metric->reset();
}

void MultiMetric::update(const MetricInputs& inputs) {
  for (auto& e : metrics_) e.metric->update(inputs);
}

std::map<std::string, double> MultiMetric::compute() const {
  std::map<std::string, double> out;
  for (const auto& e : metrics_)
    for (const auto& [key, value] : e.metric->results())
      out[key.empty() ? e.name : e.name + "." + key] = value;
  return out;
}

std::vector<std::pair<std::string, double*>> MultiMetric::accumulators() {
  std::vector<std::pair<std::string, double*>> out;
  for (auto& e : metrics_)
    for (auto& [name, value] : e.metric->accumulators()) out.emplace_back(e.name + "." + name, value);
  return out;
}

Metric& MultiMetric::operator[](const std::string& name) {
  for (auto& e : metrics_)
    if (e.name == name) return *e.metric;
  NNX_FAIL("MultiMetric has no metric '{}'", name);
}

}  // namespace nnx::metrics
