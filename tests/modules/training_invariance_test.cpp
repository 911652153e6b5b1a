// Mesh invariance of training: an attention block and an MLP, created sharded under a
// MeshContext, trained 5 Adam steps in float32 on data-parallel, tensor-parallel and mixed
// layouts, follow the one-device run (losses and parameters within relative 1e-5).
#include "../catch_after_torch.h"

#include <nnx/nnx.h>

#include <torch/types.h>
#include <torch/utils.h>

namespace {

using nnx::none;
using nnx::P;

struct AttentionBlock : nnx::Module {
  explicit AttentionBlock(nnx::Rngs& rngs)
      : norm(16, rngs),
        // No attention biases: the key bias's gradient is identically zero (softmax ignores a
        // shift shared by all keys), and Adam turns its rounding noise into full-size steps.
        attn(8, 16, rngs,
             {.use_bias = false,
              .qkv_kernel_metadata = {.out_sharding = P("embed", "heads", none)},
              .qkv_bias_metadata = {.out_sharding = P("heads", none)},
              .out_kernel_metadata = {.out_sharding = P("heads", none, "embed")}}),
        mlp({16, 32, 16}, rngs,
            {.kernel_metadata = {{.out_sharding = P("embed", "mlp")},
                                 {.out_sharding = P("mlp", "embed")}},
             .bias_metadata = {{.out_sharding = P("mlp")}, {}}}),
        head(16, 4, rngs) {}

  // x [batch, length, 16] -> [batch, 4]
  nnx::Array operator()(const nnx::Array& x) const {
    nnx::Array h = x + attn(norm(x), /*causal=*/true);
    h = h + mlp(h);
    return head(nnx::mean(h, {1}));
  }

  nnx::LayerNorm NNX_FIELD(norm);
  nnx::MultiHeadAttention NNX_FIELD(attn);
  nnx::MLP NNX_FIELD(mlp);
  nnx::Linear NNX_FIELD(head);
};

struct TwoLayerMLP : nnx::Module {
  explicit TwoLayerMLP(nnx::Rngs& rngs)
      : mlp({16, 32, 4}, rngs,
            {.kernel_metadata = {{.out_sharding = P("embed", "mlp")},
                                 {.out_sharding = P("mlp", "embed")}},
             .bias_metadata = {{.out_sharding = P("mlp")}, {}}}) {}
  // x [batch, length, 16] -> [batch, 4] (mean over length first)
  nnx::Array operator()(const nnx::Array& x) const { return mlp(nnx::mean(x, {1})); }
  nnx::MLP NNX_FIELD(mlp);
};

struct Layout {
  std::string name;
  std::vector<int64_t> mesh_shape;
  std::vector<std::string> axes;
  nnx::ShardingRules rules;
};

std::vector<Layout> layouts() {
  return {
      {"data parallel", {8}, {"data"},
       {{"batch", "data"}, {"heads", none}, {"mlp", none}, {"embed", none}}},
      {"tensor parallel", {8}, {"model"},
       {{"batch", none}, {"heads", "model"}, {"mlp", "model"}, {"embed", none}}},
      {"mixed 2x4", {2, 4}, {"data", "model"},
       {{"batch", "data"}, {"heads", "model"}, {"mlp", "model"}, {"embed", none}}},
      {"mixed 4x2", {4, 2}, {"data", "model"},
       {{"batch", "data"}, {"heads", "model"}, {"mlp", "model"}, {"embed", none}}},
  };
}

// max |a - b| within 1e-5 of max |b| (a compared on b's device).
void check_close(const at::Tensor& a, const at::Tensor& b) {
  double scale = b.abs().max().item<double>();
  double err = (a.to(b.device()) - b).abs().max().item<double>();
  CHECK(err <= 1e-5 * std::max(scale, 1e-30));
}

template <class Model> void check_invariance() {
  torch::manual_seed(0);
  auto x = torch::randn({8, 4, 16}), y = torch::randn({8, 4});
  auto loss_fn = [](Model& m, const nnx::Array& xs, const nnx::Array& ys) {
    return nnx::mean_squared_error(m(xs), ys);
  };
  auto train = [&](Model& model, const nnx::Array& xs, const nnx::Array& ys) {
    nnx::optim::Optimizer opt(model, nnx::optim::adam(1e-2));
    std::vector<at::Tensor> losses;
    for (int step = 0; step < 5; ++step) {
      auto [loss, grads] =
          nnx::value_and_grad([&](Model& m) { return loss_fn(m, xs, ys); }, model);
      opt.update(model, grads);
      losses.push_back(nnx::gather(loss));
    }
    return losses;
  };
  nnx::Rngs ref_rngs(0);
  Model reference(ref_rngs);
  auto ref_losses = train(reference, nnx::Array(x), nnx::Array(y));
  CHECK(ref_losses.back().template item<double>() < ref_losses.front().template item<double>());
  for (const auto& layout : layouts()) {
    INFO(layout.name);
    auto mesh = nnx::make_mesh(layout.mesh_shape, layout.axes);
    nnx::LogicalAxisRules rules(layout.rules);
    nnx::MeshContext on(mesh);
    nnx::Rngs rngs(0);
    Model model(rngs);
    auto batch = nnx::apply_rules(P("batch"), nnx::current_logical_axis_rules());
    auto xs = nnx::device_put(x, {mesh, batch});
    auto ys = nnx::device_put(y, {mesh, batch});
    nnx::fallback_count() = 0;
    auto losses = train(model, xs, ys);
    CHECK(nnx::fallback_count() == 0);
    for (size_t s = 0; s < losses.size(); ++s) {
      INFO("step " << s);
      check_close(losses[s], ref_losses[s]);
    }
    for (const auto& [path, v] : nnx::state(model)) {
      INFO(path);
      check_close(nnx::gather(v.value()), nnx::state(reference)[path].tensor());
    }
  }
}

}  // namespace

TEST_CASE("an attention block trains the same on every mesh and layout", "[ranks8]") {
  check_invariance<AttentionBlock>();
}

TEST_CASE("a two-layer MLP trains the same on every mesh and layout in float32", "[ranks8]") {
  check_invariance<TwoLayerMLP>();
}
