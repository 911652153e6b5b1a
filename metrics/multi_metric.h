// MultiMetric, as flax.nnx.metrics.MultiMetric: several metrics updated by one call with the same
// named inputs, each taking the ones it needs.
//   nnx::metrics::MultiMetric metrics({{"loss", nnx::metrics::Average("loss")},
//                                      {"accuracy", nnx::metrics::Accuracy()}});
//   metrics.update({{"loss", loss}, {"logits", logits}, {"labels", labels}});
//   metrics.compute();  // {"accuracy": 0.9, "loss": 0.31}
#pragma once

#include <nnx/metrics/metric.h>

#include <concepts>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace nnx::metrics {

class MultiMetric : public Metric {
 public:
  // Any metric, by value.
  struct Entry {
    template <std::derived_from<Metric> M>
    Entry(std::string name, M metric)
        : name(std::move(name)), metric(std::make_unique<M>(std::move(metric))) {}
    Entry(const Entry& other) : name(other.name), metric(other.metric->clone()) {}
    std::string name;
    std::unique_ptr<Metric> metric;
  };

  MultiMetric(std::initializer_list<Entry> metrics);
  MultiMetric(const MultiMetric& other);

  void reset() override;
  void update(const MetricInputs& inputs) override;
  // Each metric's results under its name ("loss"), or "name.statistic" ("loss.mean").
  std::map<std::string, double> compute() const;
  std::map<std::string, double> results() const override { return compute(); }
  std::unique_ptr<Metric> clone() const override { return std::make_unique<MultiMetric>(*this); }
  // The metric called `name`.
  Metric& operator[](const std::string& name);

 protected:
  // Each metric's accumulators under its name: "loss.total", "accuracy.count".
  std::vector<std::pair<std::string, double*>> accumulators() override;

 private:
  std::vector<Entry> metrics_;
};

}  // namespace nnx::metrics
