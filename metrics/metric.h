// Metric: the interface of flax.nnx.metrics. update() takes named inputs (Flax's keyword
// arguments: "values", "loss", "logits", "labels", and an optional "mask"); compute() reads the
// result. Inputs may be sharded Arrays: every update reduces over the mesh, so the results equal
// a one-device run's. update() is therefore collective over the inputs' mesh.
#pragma once

#include <nnx/sharding/array.h>

#include <map>
#include <memory>
#include <string>

namespace nnx::metrics {

using MetricInputs = std::map<std::string, Array>;

class Metric {
 public:
  virtual ~Metric() = default;
  virtual void reset() = 0;
  virtual void update(const MetricInputs& inputs) = 0;
  // The results by name: "" for a metric with one value, else each statistic's name.
  virtual std::map<std::string, double> results() const = 0;
  virtual std::unique_ptr<Metric> clone() const = 0;
};

}  // namespace nnx::metrics
