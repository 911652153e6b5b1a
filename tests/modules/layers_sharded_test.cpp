// Data-parallel BatchNorm and Conv: outputs, running statistics and reduced gradients equal the
// one-device run.
#include "../catch_after_torch.h"

#include <nnx/nnx.h>

#include <torch/types.h>
#include <torch/utils.h>

namespace {

struct ConvNet : nnx::Module {
  explicit ConvNet(nnx::Rngs& rngs) : conv(3, 4, {3, 3}, rngs), bn(4, rngs, {.momentum = 0.8}) {}
  nnx::Array operator()(const nnx::Array& x) { return nnx::relu(bn(conv(x))); }
  nnx::Conv NNX_FIELD(conv);
  nnx::BatchNorm NNX_FIELD(bn);
};

}  // namespace

TEST_CASE("data-parallel Conv and BatchNorm equal the one-device run", "[ranks2][ranks4][ranks8]") {
  const int64_t n = nnx::world_size();
  torch::manual_seed(1);
  auto x = torch::randn({2 * n, 6, 5, 3}, torch::kDouble);
  auto loss_of = [](ConvNet& m, const nnx::Array& in) { return nnx::mean(nnx::square(m(in))); };
  nnx::Rngs ref_rngs(0);
  ConvNet reference(ref_rngs);
  auto [ref_loss, ref_grads] = nnx::value_and_grad(
      [&](ConvNet& m) { return loss_of(m, nnx::Array(x.to(torch::kFloat))); }, reference);

  auto mesh = nnx::make_mesh({n}, {"data"});
  nnx::MeshContext on(mesh);
  nnx::Rngs rngs(0);
  ConvNet model(rngs);
  auto xs = nnx::device_put(x.to(torch::kFloat), {mesh, nnx::P("data")});
  nnx::fallback_count() = 0;
  auto [loss, grads] = nnx::value_and_grad([&](ConvNet& m) { return loss_of(m, xs); }, model);
  CHECK(nnx::fallback_count() == 0);
  CHECK(nnx::gather(loss).item<double>() == Approx(ref_loss.local().item<double>()).epsilon(1e-5));
  for (const auto& [path, g] : ref_grads) {
    INFO(path);
    CHECK(torch::allclose(nnx::gather(grads[path].value()).cpu(), g.tensor(), 1e-4, 1e-6));
  }
  for (const auto* path : {"bn.mean", "bn.var"}) {
    INFO(path);
    CHECK(nnx::state(model)[path].value().is_fully_replicated());
    CHECK(torch::allclose(nnx::gather(nnx::state(model)[path].value()).cpu(),
                          nnx::state(reference)[path].tensor(), 1e-5, 1e-6));
  }
  // The one-device reference itself against LibTorch on the same parameters.
  auto w = reference.conv.kernel.tensor().permute({3, 2, 0, 1});
  auto conv = torch::conv2d(x.to(torch::kFloat).permute({0, 3, 1, 2}), w,
                            reference.conv.bias->tensor(), 1, 1);
  auto flat = conv.permute({0, 2, 3, 1}).reshape({-1, 4});
  CHECK(torch::allclose(nnx::state(reference)["bn.mean"].tensor(), 0.2 * flat.mean(0), 1e-4, 1e-6));
}
