// Small modules shared by the framework tests (the real layers live in modules/).
#pragma once

#include <nnx/nnx.h>

#include <torch/types.h>

namespace nnx_test {

// A Flax-like dense layer: kernel key then bias key drawn from rngs.params().
struct Dense : nnx::Module {
  nnx::Param NNX_FIELD(kernel);
  nnx::Param NNX_FIELD(bias);
  int64_t features = 0;  // plain members need no NNX_FIELD

  Dense(int64_t in, int64_t out, nnx::Rngs& rngs,
        nnx::Initializer kernel_init = nnx::initializers::lecun_normal(),
        nnx::Metadata kernel_metadata = {})
      : kernel(kernel_init(rngs.params(), {in, out}), kernel_metadata),
        bias(nnx::initializers::zeros()(rngs.params(), {out})),
        features(out) {}
  at::Tensor operator()(const at::Tensor& x) const {
    return x.matmul(kernel.tensor()) + bias.tensor();
  }
};

struct Counter : nnx::Module {
  nnx::BatchStat NNX_FIELD(count);
  Counter() : count(torch::zeros({}, torch::kLong)) {}
};

struct MLP : nnx::Module {
  Dense NNX_FIELD(input);
  std::vector<Dense> NNX_FIELD(layers);
  std::map<std::string, Counter> NNX_FIELD(stats);
  nnx::Intermediate NNX_FIELD(activations);

  MLP(int64_t din, int64_t hidden, int64_t depth, nnx::Rngs& rngs) : input(din, hidden, rngs) {
    for (int64_t i = 0; i < depth; ++i) layers.emplace_back(hidden, hidden, rngs);
    stats.emplace("train", Counter());
  }
  at::Tensor operator()(const at::Tensor& x) {
    auto h = torch::relu(input(x));
    for (auto& layer : layers) h = torch::relu(layer(h));
    activations = nnx::Intermediate(h);
    return h;
  }
};

// Encoder and decoder reading one embedding table (tied weights).
struct Tied : nnx::Module {
  nnx::Param NNX_FIELD(embedding);
  Dense NNX_FIELD(body);
  nnx::Param NNX_FIELD(unembedding);
  explicit Tied(nnx::Rngs& rngs)
      : embedding(nnx::initializers::normal(1.0)(rngs.params(), {5, 4})), body(4, 4, rngs),
        unembedding(embedding) {}
};

}  // namespace nnx_test
