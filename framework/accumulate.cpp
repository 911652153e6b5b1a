// Summing micro-batch gradients.
#include <nnx/framework/accumulate.h>
#include <nnx/framework/error.h>
#include <nnx/sharding/ops.h>

#include <torch/torch.h>

namespace nnx::detail {

void add_grads(State& acc, const State& g) {
  torch::NoGradGuard no_grad;
  if (acc.empty()) {
    // Take the first micro-batch's gradient variables (fresh per call) over owned tensors.
    for (const auto& [path, v] : g) {
      Variable taken = v;
      taken.set_value(v.value().with_local(v.tensor().clone()));
      acc.add(path, taken);
    }
    return;
  }
  NNX_CHECK(acc.paths() == g.paths(), "micro-batches produced gradients for different paths");
  for (const auto& [path, v] : g) acc[path].tensor().add_(v.tensor());
}

void scale_grads(State& grads, double s) {
  torch::NoGradGuard no_grad;
  for (auto& [path, v] : grads) v.tensor().mul_(s);
}

Array add_loss(const Array& acc, const Array& loss) { return acc + loss; }
Array scale_loss(const Array& loss, double s) { return loss * s; }

void check_micro_batches(int64_t micro_batches) {
  NNX_CHECK(micro_batches >= 1, "micro_batches must be >= 1, got {}", micro_batches);
}

}  // namespace nnx::detail
