// A first tour of nnx: define a module, print its state (paths, shapes, metadata), round-trip
// split/merge, and build the same model abstractly with eval_shape.
#include <nnx/nnx.h>

#include <torch/torch.h>

#include <iostream>

// A Flax-style dense layer: each field is named once, with NNX_FIELD.
struct Dense : nnx::Module {
  nnx::Param NNX_FIELD(kernel);
  nnx::Param NNX_FIELD(bias);

  Dense(int64_t in, int64_t out, nnx::Rngs& rngs, nnx::PartitionSpec kernel_spec = {})
      : kernel(nnx::with_partitioning(nnx::initializers::lecun_normal(), kernel_spec)(
            rngs.params(), {in, out})),
        bias(nnx::initializers::zeros()(rngs.params(), {out})) {}

  at::Tensor operator()(const at::Tensor& x) const {
    return x.matmul(kernel.tensor()) + bias.tensor();
  }
};

struct MLP : nnx::Module {
  Dense NNX_FIELD(up);
  std::vector<Dense> NNX_FIELD(blocks);
  Dense NNX_FIELD(down);
  nnx::BatchStat NNX_FIELD(steps);

  MLP(int64_t din, int64_t hidden, int64_t dout, nnx::Rngs& rngs)
      : up(din, hidden, rngs, nnx::P("embed", "mlp")),
        down(hidden, dout, rngs, nnx::P("mlp", "embed")),
        steps(torch::zeros({}, torch::kLong)) {
    for (int i = 0; i < 2; ++i) blocks.emplace_back(hidden, hidden, rngs, nnx::P("mlp", nnx::none));
  }

  at::Tensor operator()(const at::Tensor& x) {
    auto h = torch::relu(up(x));
    for (auto& block : blocks) h = torch::relu(block(h));
    return down(h);
  }
};

int main() {
  nnx::Rngs rngs(0);
  MLP model(4, 16, 2, rngs);

  std::cout << "State of MLP(4, 16, 2):\n" << nnx::state(model).to_string() << "\n";

  // Split into structure + parameters + the rest, then merge back into a new model.
  auto [graphdef, params, rest] = nnx::split(model, nnx::OfType<nnx::Param>, nnx::Everything);
  std::cout << params.size() << " Param variables (" << params.numel() << " numbers), "
            << rest.size() << " other\n";
  MLP copy = nnx::merge(graphdef, params, rest);
  auto x = torch::randn({3, 4});
  bool same = torch::equal(copy(x), model(x));
  std::cout << "merge(split(model)) gives the same outputs: " << (same ? "yes" : "NO") << "\n";

  // The same model with no storage: shapes, dtypes and metadata only.
  auto abstract = nnx::eval_shape([] {
    nnx::Rngs r(0);
    return MLP(4, 16, 2, r);
  });
  std::cout << "eval_shape: up.kernel is abstract: "
            << (abstract.up.kernel.value().is_abstract() ? "yes" : "no") << ", spec "
            << abstract.up.kernel.metadata().out_sharding->to_string() << "\n";

  std::cout << "\nGraphDef + State as JSON (first variable):\n"
            << nnx::to_json(graphdef, params)["state"][0].dump(2) << "\n";
  return same ? 0 : 1;
}
