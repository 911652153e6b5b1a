// Average, as flax.nnx.metrics.Average: the mean of every value passed as inputs[argname]
// (masked by inputs["mask"] when given), over all updates.
#pragma once

#include <nnx/metrics/metric.h>

#include <optional>
#include <string>

namespace nnx::metrics {

class Average : public Metric {
 public:
  explicit Average(std::string argname = "values") : argname_(std::move(argname)) {}
  void reset() override { total_ = count_ = 0; }
  void update(const MetricInputs& inputs) override;
  // Adds `values` (masked) directly: collective over their mesh.
  void update_values(const Array& values, const std::optional<Array>& mask = {});
  double compute() const { return total_ / count_; }  // NaN before any update, as in Flax
  double total() const { return total_; }
  double count() const { return count_; }
  std::map<std::string, double> results() const override { return {{"", compute()}}; }
  std::unique_ptr<Metric> clone() const override { return std::make_unique<Average>(*this); }

 protected:
  std::vector<std::pair<std::string, double*>> accumulators() override {
    return {{"total", &total_}, {"count", &count_}};
  }

 private:
  std::string argname_;
  double total_ = 0;
  double count_ = 0;
};

}  // namespace nnx::metrics
