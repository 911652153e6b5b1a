// Flax parity of initial parameters with nnx::Rngs(0). Expected values are not computed by
// nnx: "published" ones are printed in Flax's docstrings (nnx.Embed; nnx.Linear(4, 5) in the
// SpectralNorm docstring, flax PR #4623); the others come from an independent emulation of
// JAX's partitionable threefry, erf_inv and jax.nn.initializers (JAX >= 0.5 defaults).
#include <catch2/catch.hpp>

#include <nnx/nnx.h>

#include <torch/torch.h>

namespace {

at::Tensor f32(std::vector<float> values, std::vector<int64_t> shape) {
  return torch::tensor(values, torch::kFloat).reshape(shape);
}

// Published: nnx.Linear(4, 5, rngs=nnx.Rngs(0)).kernel, row-major.
const std::vector<float> kLinear4x5 = {
    0.5350889f,  -0.48486355f, -0.4022262f, -0.61925626f, -0.46665004f,
    0.31773907f, 0.38944173f,  -0.54608804f, 0.84378934f, -0.93099f,
    -0.67658f,   0.0724705f,   -0.6101737f, 0.12972134f,  0.877074f,
    0.27292168f, 0.32105306f,  -0.2556603f, 0.4896752f,   0.19558711f};

std::vector<float> first(const std::vector<float>& v, size_t n) { return {v.begin(), v.begin() + n}; }

}  // namespace

TEST_CASE("Linear(4, 5) with Rngs(0) holds the kernel Flax publishes") {
  nnx::Rngs rngs(0);
  nnx::Linear layer(4, 5, rngs);
  CHECK(torch::equal(layer.kernel.tensor(), f32(kLinear4x5, {4, 5})));
  CHECK(torch::equal(layer.bias->tensor(), torch::zeros({5})));
}

TEST_CASE("Embed(5, 3) with Rngs(0) holds the table Flax publishes") {
  nnx::Rngs rngs(0);
  nnx::Embed embed(5, 3, rngs);
  auto expected = f32({0.57966787f, -0.523274f, -0.43195742f, -0.676289f, -0.50300646f,
                       0.33996582f, 0.41796115f, -0.59212935f, 0.95934135f, -1.0917838f,
                       -0.7441663f, 0.077137984f, -0.66570747f, 0.13815777f, 1.007365f},
                      {5, 3});
  CHECK(torch::equal(embed.embedding.tensor(), expected));
}

TEST_CASE("a Sequential of Linears draws keys in order and matches JAX's values") {
  nnx::Rngs rngs(0);
  nnx::Sequential model{nnx::Linear(4, 3, rngs), nnx::relu, nnx::Linear(3, 4, rngs)};
  // Partitionable bits depend on the flat index only, and fan_in is 4 as for Linear(4, 5): the
  // first kernel is the first 12 published values.
  auto& first_layer = static_cast<nnx::Linear&>(*model.layers[0]);
  CHECK(torch::equal(first_layer.kernel.tensor(), f32(first(kLinear4x5, 12), {4, 3})));
  // The second Linear(3, 4) draws key 2 (after the first's kernel and bias keys).
  auto expected = f32({0.7849591f, 0.81752163f, -0.25595918f, -0.47885877f, 0.23813176f,
                       0.011833864f, 0.35809416f, -0.46755627f, 0.1440836f, -0.8888034f,
                       -0.5646415f, 1.0222695f},
                      {3, 4});
  CHECK(torch::equal(static_cast<nnx::Linear&>(*model.layers[2]).kernel.tensor(), expected));
  CHECK(nnx::state(model).paths() ==
        std::vector<std::string>{"layers.0.kernel", "layers.0.bias", "layers.2.kernel",
                                 "layers.2.bias"});
}

TEST_CASE("LoRA, LoRALinear, Conv and MultiHeadAttention match JAX's values") {
  {
    nnx::Rngs rngs(0);
    nnx::LoRA lora(3, 2, 4, rngs);
    CHECK(torch::equal(lora.lora_a.tensor(), f32({0.9682105f, -0.89836884f, -0.7716569f,
                                                  -1.0727499f, -0.8716831f, 0.6279533f},
                                                 {3, 2})));
    CHECK(torch::equal(lora.lora_b.tensor(), torch::zeros({2, 4})));
  }
  {
    nnx::Rngs rngs(0);
    nnx::LoRALinear layer(3, 4, 2, rngs);
    nnx::Rngs again(0);
    CHECK(torch::equal(layer.kernel.tensor(), nnx::Linear(3, 4, again).kernel.tensor()));
    CHECK(torch::equal(layer.lora.lora_a.tensor(),
                       f32({1.138299f, 1.1661402f, -0.44958514f, -0.7917019f, 0.4196727f,
                            0.021312818f},
                           {3, 2})));
    CHECK(nnx::state(layer).paths() ==
          std::vector<std::string>{"kernel", "bias", "lora.lora_a", "lora.lora_b"});
    CHECK(nnx::state(layer, nnx::OfType<nnx::LoRAParam>).size() == 2);
  }
  {
    nnx::Rngs rngs(0);
    nnx::Conv conv(3, 4, {3, 3}, rngs);
    CHECK(conv.kernel.shape() == nnx::Shape{3, 3, 3, 4});
    auto first_rows = conv.kernel.tensor().index({0, 0});  // kernel[0, 0, :, :]
    CHECK(torch::equal(first_rows, f32({0.2059558f, -0.18662405f, -0.15481694f, -0.23835182f,
                                        -0.17961368f, 0.122297816f, 0.14989619f, -0.21018937f,
                                        0.32477465f, -0.35833818f, -0.26041576f, 0.027893908f},
                                       {3, 4})));
  }
  {
    // LinearGeneral draws the flat [4, 4] matrix (fan_in 4): the first 16 published values.
    nnx::Rngs rngs(0);
    nnx::MultiHeadAttention mha(2, 4, rngs);
    CHECK(torch::equal(mha.query.kernel.tensor(), f32(first(kLinear4x5, 16), {4, 2, 2})));
    CHECK(mha.out.kernel.shape() == nnx::Shape{2, 2, 4});
    CHECK(nnx::state(mha).paths() ==
          std::vector<std::string>{"query.kernel", "query.bias", "key.kernel", "key.bias",
                                   "value.kernel", "value.bias", "out.kernel", "out.bias"});
    CHECK(rngs.stream("default").counter() == 8);
  }
}
