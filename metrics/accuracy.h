// Accuracy, as flax.nnx.metrics.Accuracy: the fraction of examples whose argmax over the last
// dim of inputs["logits"] equals inputs["labels"] (integers), or, with a threshold (binary
// classification), whose logits >= threshold agree with labels > 0. Masked by inputs["mask"].
#pragma once

#include <nnx/metrics/average.h>

#include <optional>

namespace nnx::metrics {

class Accuracy : public Metric {
 public:
  explicit Accuracy(std::optional<double> threshold = std::nullopt) : threshold_(threshold) {}
  void reset() override { average_.reset(); }
  void update(const MetricInputs& inputs) override;
  double compute() const { return average_.compute(); }
  std::map<std::string, double> results() const override { return {{"", compute()}}; }
  std::unique_ptr<Metric> clone() const override { return std::make_unique<Accuracy>(*this); }

 private:
  std::optional<double> threshold_;
  Average average_;
};

}  // namespace nnx::metrics
