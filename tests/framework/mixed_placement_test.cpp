// Mixed placement: a model on no mesh trained on a batch sharded over the data axis is refused
// (its gradients would silently differ per rank); a model placed on the mesh trains as on one
// device, with the data sharded or whole.
#include "../catch_after_torch.h"

#include <nnx/nnx.h>

#include <torch/types.h>
#include <torch/utils.h>

using Catch::Matchers::Contains;
using nnx::P;

namespace {
struct Net : nnx::Module {
  explicit Net(nnx::Rngs& rngs) : hidden(6, 8, rngs), out(8, 3, rngs) {}
  nnx::Array operator()(const nnx::Array& x) { return out(nnx::relu(hidden(x))); }
  nnx::Linear NNX_FIELD(hidden);
  nnx::Linear NNX_FIELD(out);
};

// Loss and whole gradients of one step.
std::pair<float, std::map<std::string, at::Tensor>> step(Net& model, const nnx::Array& x,
                                                          const nnx::Array& y) {
  auto [loss, grads] = nnx::value_and_grad(
      [&](Net& m) { return nnx::cross_entropy(m(x), y); }, model);
  std::map<std::string, at::Tensor> whole;
  for (const auto& [path, g] : grads) whole[path] = nnx::gather(g.value());
  return {nnx::gather(loss).item<float>(), whole};
}

void check_mixed_placement(int64_t ranks) {
  auto mesh = nnx::make_mesh({ranks}, {"data"});
  torch::manual_seed(0);
  auto xs = torch::randn({8, 6});
  auto ys = torch::randint(3, {8}, torch::kLong);
  nnx::Rngs one_rngs(0);
  Net one_device(one_rngs);
  auto [want_loss, want_grads] = step(one_device, nnx::Array(xs), nnx::Array(ys));

  auto x = nnx::device_put(xs, {mesh, P("data")});
  auto y = nnx::device_put(ys, {mesh, P("data")});
  nnx::Rngs rngs(0);
  Net unplaced(rngs);
  const auto kernel_before = unplaced.hidden.kernel.tensor().clone();
  CHECK_THROWS_WITH(step(unplaced, x, y),
                    Contains("the loss is computed on Mesh('data': " + std::to_string(ranks) + ")") &&
                        Contains("4 parameter(s) are on no mesh (hidden.kernel, hidden.bias") &&
                        Contains("place the model on the mesh"));
  CHECK(torch::equal(unplaced.hidden.kernel.tensor(), kernel_before));

  nnx::MeshContext on(mesh);
  nnx::Rngs placed_rngs(0);
  Net placed(placed_rngs);
  for (const auto& [xi, yi] : {std::pair(x, y), std::pair(nnx::Array(xs), nnx::Array(ys))}) {
    auto [loss, grads] = step(placed, xi, yi);  // sharded data, then whole data on every rank
    CHECK(loss == Approx(want_loss).epsilon(1e-6));
    for (const auto& [path, g] : want_grads) {
      INFO(path);
      CHECK(torch::allclose(grads.at(path).cpu(), g, 1e-5, 1e-6));
    }
  }
}
}  // namespace

TEST_CASE("a model on no mesh with data on 2 ranks is refused; a placed one trains", "[ranks2]") {
  check_mixed_placement(2);
}

TEST_CASE("a model on no mesh with data on 4 ranks is refused; a placed one trains", "[ranks4]") {
  check_mixed_placement(4);
}
