// Summing micro-batch gradients.
#include <nnx/framework/accumulate.h>
#include <nnx/framework/error.h>
#include <nnx/sharding/ops.h>

#include <torch/torch.h>

namespace nnx::detail {

void add_grads(State& acc, const State& g) {
  torch::NoGradGuard no_grad;
  if (acc.empty()) {
    for (const auto& [path, v] : g)
      acc.add(path, variable_like(v, v.value().with_local(v.tensor().clone())));
    return;
  }
  NNX_CHECK(acc.paths() == g.paths(), "micro-batches produced gradients for different paths");
  for (const auto& [path, v] : g) acc[path].tensor().add_(v.tensor());
}

void scale_grads(State& grads, double s) {
  torch::NoGradGuard no_grad;
  for (auto& [path, v] : grads) v.tensor().mul_(s);
}



}  // namespace nnx::detail
