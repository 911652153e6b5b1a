// Accuracy: the comparison runs on each process's block (the class dim made whole first), and
// the per-example hits are averaged like any sharded values.
#include <nnx/metrics/accuracy.h>

#include <nnx/core/error.h>
#include <nnx/metrics/detail/reduce.h>
#include <nnx/sharding/redistribute.h>

#include <ATen/ATen.h>

#include <algorithm>

namespace nnx::metrics {

void Accuracy::update(const MetricInputs& inputs) {
  Array logits = detail::input(inputs, "logits", "Accuracy");
  Array labels = detail::input(inputs, "labels", "Accuracy");
  const int64_t class_dims = threshold_ ? 0 : 1;
  // The labels' shape is the logits' without the class dim: no broadcast between the two.
  NNX_CHECK(logits.ndim() == labels.ndim() + class_dims &&
                std::equal(labels.shape().begin(), labels.shape().end(), logits.shape().begin()),
            "Accuracy: {} expects labels shaped as the logits{}, got logits {} and labels {}",
            threshold_ ? "binary classification" : "multi-class classification",
            class_dims ? " without their last (class) dim" : "", to_string(logits.shape()),
            to_string(labels.shape()));
  NNX_CHECK(!at::isFloatingType(labels.dtype()) && !at::isComplexType(labels.dtype()),
            "Accuracy: labels must be integers, got {}", dtype_name(labels.dtype()));
  // An input on no mesh is whole on every rank: it joins the other's mesh, replicated, so that
  // both are compared row for row (a block was compared with whole rows).
  if (logits.mesh() && !labels.mesh())
    labels = device_put(labels.local(), {logits.mesh(), PartitionSpec()});
  if (!logits.mesh() && labels.mesh())
    logits = device_put(logits.local(), {labels.mesh(), PartitionSpec()});
  if (logits.mesh()) {
    // Each process compares whole rows: the class dim unsplit, labels laid out as the rows.
    std::vector<SpecEntry> entries(logits.spec().entries());
    if (class_dims) entries.back() = none;
    logits = redistribute(logits, PartitionSpec(entries));
    if (class_dims) entries.pop_back();
    labels = redistribute(labels, NamedSharding{logits.mesh(), PartitionSpec(entries)});
  }
  at::Tensor hits = threshold_ ? (logits.local() >= *threshold_).eq(labels.local() > 0)
                               : logits.local().argmax(-1).eq(labels.local());
  Array correct = labels.with_local(hits.to(at::kDouble));
  update_values(correct, detail::mask_of(inputs));
}

}  // namespace nnx::metrics
