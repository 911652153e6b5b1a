// Gradient reduction over replica axes, and the seeding of a loss's cotangent.
#include <nnx/core/error.h>
#include <nnx/sharding/gradient.h>

#include <torch/types.h>

namespace nnx {

std::vector<std::string> replica_axes(const Array& a) {
  std::vector<std::string> axes;
  if (!a.mesh()) return axes;
  auto placements = a.placements();
  for (size_t i = 0; i < placements.size(); ++i)
    if (placements[i].is_replicate() && a.mesh()->shape()[i] > 1)
      axes.push_back(a.mesh()->axis_names()[i]);
  return axes;
}

Array reduce_gradient(const Array& param, const at::Tensor& local_grad) {
  NNX_CHECK(local_grad.defined(),
            "no gradient reached this parameter on this process; every process must use every "
            "parameter in the loss");
  NNX_CHECK(local_grad.sizes() == param.local().sizes(),
            "local gradient of shape {} for a local block of shape {}",
            to_string(local_grad.sizes().vec()), to_string(param.local().sizes().vec()));
  at::Tensor g = local_grad.detach().clone();
  if (!param.mesh()) return Array(g);
  auto axes = replica_axes(param);
  if (!axes.empty()) param.mesh()->comm(axes).all_reduce_(g);
  return param.with_local(g);
}

at::Tensor loss_cotangent(const Array& loss) {
  at::Tensor seed = torch::ones_like(loss.local());
  if (!loss.mesh()) return seed;
  auto placements = loss.placements();
  auto coords = loss.mesh()->coordinates();
  for (size_t a = 0; a < placements.size(); ++a)
    if (placements[a].is_replicate() && coords[a] != 0) return torch::zeros_like(seed);
  return seed;
}

}  // namespace nnx
