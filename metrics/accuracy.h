// Accuracy, as flax.nnx.metrics.Accuracy (an Average of hits): the fraction of examples whose
// argmax over the last dim of inputs["logits"] equals inputs["labels"] (integers), or, with a
// threshold (binary classification), whose logits >= threshold agree with labels > 0. Masked by
// inputs["mask"].
#pragma once

#include <nnx/metrics/average.h>

#include <optional>

namespace nnx::metrics {

class Accuracy : public Average {
 public:
  explicit Accuracy(std::optional<double> threshold = std::nullopt) : threshold_(threshold) {}
  void update(const MetricInputs& inputs) override;
  std::unique_ptr<Metric> clone() const override { return std::make_unique<Accuracy>(*this); }

 private:
  std::optional<double> threshold_;
};

}  // namespace nnx::metrics
