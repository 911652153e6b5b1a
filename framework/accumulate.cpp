// Scaling summed micro-batch gradients.
#include <nnx/framework/accumulate.h>
#include <nnx/core/error.h>
#include <nnx/sharding/ops.h>

#include <torch/types.h>
#include <torch/utils.h>

namespace nnx::detail {

void scale_grads(State& grads, double s) {
  torch::NoGradGuard no_grad;
  for (auto& [path, v] : grads) v.tensor().mul_(s);
}

}  // namespace nnx::detail
