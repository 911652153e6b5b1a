// Welford, as flax.nnx.metrics.Welford: the running mean, standard deviation and standard error
// of the mean of every value passed as inputs[argname] (masked by inputs["mask"] when given),
// merging each batch with Chan's parallel update.
#pragma once

#include <nnx/metrics/metric.h>

#include <string>

namespace nnx::metrics {

struct Statistics {
  double mean = 0;
  double standard_error_of_mean = 0;
  double standard_deviation = 0;
};

class Welford : public Metric {
 public:
  explicit Welford(std::string argname = "values") : argname_(std::move(argname)) {}
  void reset() override { count_ = mean_ = m2_ = 0; }
  void update(const MetricInputs& inputs) override;
  Statistics compute() const;  // NaN deviations before any update, as in Flax
  double count() const { return count_; }
  std::map<std::string, double> results() const override;
  std::unique_ptr<Metric> clone() const override { return std::make_unique<Welford>(*this); }

 protected:
  std::vector<std::pair<std::string, double*>> accumulators() override {
    return {{"count", &count_}, {"mean", &mean_}, {"m2", &m2_}};
  }

 private:
  std::string argname_;
  double count_ = 0;
  double mean_ = 0;
  double m2_ = 0;  // sum of squared deviations from the mean
};

}  // namespace nnx::metrics
