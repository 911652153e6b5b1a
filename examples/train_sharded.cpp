// A complete sharded training run: a user module with logical axis names, created directly on a
// (data, model) mesh (each rank computes only its blocks), AdamW, a train step, and a loop
// that runs K steps per nnx::scan call. Run: mpirun -np 8 --oversubscribe build/examples/train_sharded
#include <nnx/nnx.h>

#include <torch/torch.h>

#include <fmt/format.h>

using nnx::P;

struct Classifier : nnx::Module {
  Classifier(int64_t features, int64_t hidden, int64_t classes, nnx::Rngs& rngs)
      : norm(features, rngs),
        mlp({features, hidden, features}, rngs,
            {.activation = [](const nnx::Array& x) { return nnx::gelu(x); },
             .kernel_metadata = {{.out_sharding = P("embed", "mlp")},
                                 {.out_sharding = P("mlp", "embed")}},
             .bias_metadata = {{.out_sharding = P("mlp")}, {}}}),
        head(features, classes, rngs, {.kernel_metadata = {.out_sharding = P("embed", nnx::none)}}),
        dropout(0.1, rngs) {}

  nnx::Array operator()(const nnx::Array& x) {
    nnx::Array h = x + dropout(mlp(norm(x)));   // residual block
    return head(h);
  }

  nnx::LayerNorm NNX_FIELD(norm);
  nnx::MLP NNX_FIELD(mlp);
  nnx::Linear NNX_FIELD(head);
  nnx::Dropout NNX_FIELD(dropout);
};

int main() {
  const int64_t ranks = nnx::world_size();
  const int64_t model_ways = ranks % 2 == 0 ? 2 : 1;
  auto mesh = nnx::make_mesh({ranks / model_ways, model_ways}, {"data", "model"});
  nnx::LogicalAxisRules rules({{"batch", "data"}, {"mlp", "model"}, {"embed", nnx::none}});

  // Sharded creation: under the mesh context every variable materializes its own block only.
  nnx::MeshContext on(mesh);
  nnx::Rngs rngs(0, {{"dropout", 1}});
  Classifier model(16, 64, 4, rngs);
  nnx::optim::Optimizer opt(model, nnx::optim::adamw(1e-2));

  auto train_step = [&](const nnx::Array& x, const nnx::Array& y) {
    auto [loss, grads] = nnx::value_and_grad(
        [&](Classifier& m) { return nnx::cross_entropy(m(x), y); }, model);
    opt.update(model, grads);  // gradients arrive already reduced over the data axis
    return loss;
  };

  // Synthetic data, [steps, batch, features], each rank loading only its rows of the batch.
  torch::manual_seed(0);
  const int64_t steps = 10, batch = 8 * ranks;
  auto centers = torch::randn({4, 16}) * 2;
  for (int epoch = 0; epoch < 3; ++epoch) {
    auto labels = torch::randint(4, {steps, batch}, torch::kLong);
    auto inputs = centers.index_select(0, labels.reshape({-1})).reshape({steps, batch, 16}) +
                  torch::randn({steps, batch, 16});
    auto x = nnx::device_put(inputs, {mesh, P(nnx::none, "data")});
    auto y = nnx::device_put(labels, {mesh, P(nnx::none, "data")});
    nnx::Array losses = nnx::scan(train_step, x, y);  // [steps]
    auto all = nnx::gather(losses);
    if (nnx::world_rank() == 0)
      fmt::print("epoch {}: loss {:.4f} -> {:.4f} (step {})\n", epoch, all[0].item<float>(),
                 all[steps - 1].item<float>(), opt.step());
  }
  if (nnx::world_rank() == 0)
    fmt::print("{} on {}; mlp.layers.0.kernel is {} per rank\n", model.type_name(),
               mesh->to_string(), nnx::to_string(model.mlp.layers[0].kernel.tensor().sizes().vec()));
  return 0;
}
