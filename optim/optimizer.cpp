// Optimizer steps.
#include <nnx/framework/error.h>
#include <nnx/framework/graph.h>
#include <nnx/optim/optimizer.h>

#include <torch/torch.h>

namespace nnx::optim {

Optimizer::Optimizer(Module& model, GradientTransformation tx, Filter wrt)
    : tx_(std::move(tx)), wrt_(std::move(wrt)) {
  state_ = tx_.init(nnx::state(model, wrt_));
}

void Optimizer::update(Module& model, State grads) {
  State params = nnx::state(model, wrt_);
  tx_.update(grads, state_, params);
  torch::NoGradGuard no_grad;
  auto u = grads.begin();
  for (auto& [path, p] : params) {
    NNX_CHECK(u->second.shape() == p.shape(), "update for '{}' has shape {}, the parameter {}",
              path, to_string(u->second.shape()), to_string(p.shape()));
    p.tensor().add_(u->second.tensor().to(p.dtype()));
    ++u;
  }
  ++step_;
}

}  // namespace nnx::optim
