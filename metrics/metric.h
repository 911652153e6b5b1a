// Metric: the interface of flax.nnx.metrics. update() takes named inputs (Flax's keyword
// arguments: "values", "loss", "logits", "labels", and an optional "mask"); compute() reads the
// result. Inputs may be sharded Arrays: every update reduces over the mesh, so the results equal
// a one-device run's. update() is therefore collective over the inputs' mesh. state() holds the
// accumulators, so a checkpoint taken mid-epoch resumes the epoch's metrics too.
#pragma once

#include <nnx/framework/state.h>
#include <nnx/framework/variable.h>
#include <nnx/sharding/array.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace nnx::metrics {

using MetricInputs = std::map<std::string, Array>;

// The kind of a metric's accumulators in a State (Flax's nnx.metrics.MetricState).
struct MetricState : VariableKind<MetricState> { using VariableKind::VariableKind; };

class Metric {
 public:
  virtual ~Metric() = default;
  virtual void reset() = 0;
  virtual void update(const MetricInputs& inputs) = 0;
  // The results by name: "" for a metric with one value, else each statistic's name.
  virtual std::map<std::string, double> results() const = 0;
  virtual std::unique_ptr<Metric> clone() const = 0;

  // The accumulators, as float64 scalars ("total", "count", ...), to save in a checkpoint.
  State state() const;
  // Sets the accumulators from state(); errors, changing nothing, if one is missing.
  void load_state(const State& state);

 protected:
  // Each accumulator by name, in a fixed order.
  virtual std::vector<std::pair<std::string, double*>> accumulators() = 0;
  friend class MultiMetric;
};

}  // namespace nnx::metrics
