// BatchNorm, Conv, MultiHeadAttention, LoRA, MLP and Sequential against LibTorch formulas.
#include "../catch_after_torch.h"

#include <nnx/nnx.h>

#include <torch/types.h>

TEST_CASE("BatchNorm normalizes with batch statistics and updates the running averages") {
  nnx::Rngs rngs(0);
  nnx::BatchNorm bn(6, rngs, {.momentum = 0.9});
  CHECK(rngs.stream("default").counter() == 2);  // scale key, then bias key
  CHECK(nnx::state(bn).paths() == std::vector<std::string>{"mean", "var", "scale", "bias"});
  CHECK(nnx::state(bn, nnx::OfType<nnx::BatchStat>).size() == 2);
  auto x = torch::randn({4, 5, 6}, torch::kFloat) * 3 + 1;
  auto flat = x.reshape({-1, 6});
  auto mu = flat.mean(0);
  auto var = flat.var(0, /*unbiased=*/false);
  auto y = bn(nnx::Array(x));
  CHECK(torch::allclose(y.local(), (x - mu) / (var + 1e-5).sqrt(), 1e-4, 1e-5));
  CHECK(torch::allclose(bn.mean.tensor(), 0.1 * mu, 1e-5, 1e-6));
  CHECK(torch::allclose(bn.var.tensor(), 0.9 + 0.1 * var, 1e-5, 1e-6));
  CHECK(bn.mean.dtype() == at::kFloat);
  CHECK_FALSE(bn.mean.tensor().requires_grad());
  // eval(): the running averages, and no update.
  bn.eval();
  auto running_mean = bn.mean.tensor().clone();
  auto z = bn(nnx::Array(x));
  CHECK(torch::allclose(z.local(), (x - running_mean) / (bn.var.tensor() + 1e-5).sqrt(), 1e-5, 1e-5));
  CHECK(torch::equal(bn.mean.tensor(), running_mean));
  CHECK_THROWS_WITH(bn(nnx::Array(torch::ones({2, 5}))), Catch::Contains("6 features"));
}

TEST_CASE("Conv matches LibTorch's conv2d with JAX's SAME padding") {
  nnx::Rngs rngs(0);
  auto x = torch::randn({2, 7, 6, 3});
  for (auto [strides, padding] : {std::pair{std::array<int64_t, 2>{1, 1}, std::string("SAME")},
                                  std::pair{std::array<int64_t, 2>{2, 2}, std::string("SAME")},
                                  std::pair{std::array<int64_t, 2>{2, 1}, std::string("VALID")}}) {
    INFO(padding << " strides " << strides[0] << "," << strides[1]);
    nnx::Conv conv(3, 4, {3, 3}, rngs, {.strides = strides, .padding = padding});
    conv.bias->set_value(nnx::Array(torch::randn({4})));
    auto w = conv.kernel.tensor().permute({3, 2, 0, 1});
    auto input = x.permute({0, 3, 1, 2});
    if (padding == "SAME") {
      // JAX: out = ceil(in / stride); total pad split with the smaller half first.
      auto pad = [&](int64_t in, int64_t s) {
        int64_t out = (in + s - 1) / s, total = std::max<int64_t>((out - 1) * s + 3 - in, 0);
        return std::pair{total / 2, total - total / 2};
      };
      auto [t, b] = pad(7, strides[0]);
      auto [l, r] = pad(6, strides[1]);
      input = torch::constant_pad_nd(input, {l, r, t, b});
    }
    auto expected = torch::conv2d(input, w, conv.bias->tensor(), {strides[0], strides[1]})
                        .permute({0, 2, 3, 1});
    auto y = conv(nnx::Array(x));
    CHECK(y.shape() == expected.sizes().vec());
    CHECK(torch::allclose(y.local(), expected, 1e-5, 1e-5));
  }
}

TEST_CASE("MultiHeadAttention computes softmax(q k^T / sqrt(d)) v per head, causal or not") {
  nnx::Rngs rngs(0);
  nnx::MultiHeadAttention mha(2, 8, rngs, {.qkv_features = 6, .out_features = 5});
  CHECK(mha.query.kernel.shape() == nnx::Shape{8, 2, 3});
  CHECK(mha.out.kernel.shape() == nnx::Shape{2, 3, 5});
  for (auto* lg : {&mha.query, &mha.key, &mha.value})
    lg->bias->set_value(nnx::Array(torch::randn({2, 3})));
  auto x = torch::randn({3, 4, 8});
  auto project = [&](const nnx::LinearGeneral& p) {  // [b, l, h, d]
    return torch::einsum("bli,ihd->blhd", {x, p.kernel.tensor()}) + p.bias->tensor();
  };
  auto q = project(mha.query), k = project(mha.key), v = project(mha.value);
  for (bool causal : {false, true}) {
    auto logits = torch::einsum("bqhd,bkhd->bhqk", {q / std::sqrt(3.0), k});
    if (causal) logits = logits.masked_fill(torch::ones({4, 4}).triu(1).to(torch::kBool), -1e30);
    auto attended = torch::einsum("bhqk,bkhd->bqhd", {logits.softmax(-1), v});
    auto expected = torch::einsum("bqhd,hdo->bqo", {attended, mha.out.kernel.tensor()}) +
                    mha.out.bias->tensor();
    CHECK(torch::allclose(mha(nnx::Array(x), causal).local(), expected, 1e-5, 1e-5));
  }
  CHECK_THROWS_WITH(nnx::MultiHeadAttention(4, 6, rngs), Catch::Contains("multiple of num_heads"));
}

TEST_CASE("LoRALinear adds x @ a @ b to the Linear, and a filter trains the adapter alone") {
  nnx::Rngs rngs(0);
  nnx::LoRALinear layer(4, 3, 2, rngs);
  layer.lora.lora_b.set_value(nnx::Array(torch::randn({2, 3})));
  auto x = torch::randn({5, 4});
  auto expected = x.matmul(layer.kernel.tensor()) + layer.bias->tensor() +
                  x.matmul(layer.lora.lora_a.tensor()).matmul(layer.lora.lora_b.tensor());
  CHECK(torch::allclose(layer(nnx::Array(x)).local(), expected, 1e-5, 1e-6));
  // A bfloat16 input meets the float32 parameters in float32 (Flax's promote_dtype, jnp.matmul).
  const at::Tensor x16 = x.to(torch::kBFloat16), rounded = x16.to(torch::kFloat);
  const nnx::Array y16 = layer(nnx::Array(x16));
  CHECK(y16.dtype() == torch::kFloat);
  CHECK(torch::allclose(y16.local(),
                        rounded.matmul(layer.kernel.tensor()) + layer.bias->tensor() +
                            rounded.matmul(layer.lora.lora_a.tensor())
                                .matmul(layer.lora.lora_b.tensor()),
                        1e-5, 1e-6));
  auto [loss, grads] = nnx::value_and_grad(
      [&](nnx::LoRALinear& m) { return nnx::mean(nnx::square(m(nnx::Array(x)))); }, layer,
      {.wrt = nnx::OfType<nnx::LoRAParam>});
  CHECK(grads.paths() == std::vector<std::string>{"lora.lora_a", "lora.lora_b"});
  nnx::optim::Optimizer opt(layer, nnx::optim::sgd(0.1), nnx::OfType<nnx::LoRAParam>);
  auto kernel = layer.kernel.tensor().clone();
  auto a = layer.lora.lora_a.tensor().clone();
  opt.update(layer, grads);
  CHECK(torch::equal(layer.kernel.tensor(), kernel));
  CHECK(torch::allclose(layer.lora.lora_a.tensor(), a - 0.1 * grads["lora.lora_a"].tensor()));
}

TEST_CASE("MLP and Sequential call their layers in order; copies call their own layers") {
  nnx::Rngs rngs(0);
  nnx::MLP mlp({4, 8, 3}, rngs, {.activation = [](const nnx::Array& a) { return nnx::tanh(a); }});
  CHECK(nnx::state(mlp).paths() == std::vector<std::string>{"layers.0.kernel", "layers.0.bias",
                                                            "layers.1.kernel", "layers.1.bias"});
  auto x = torch::randn({2, 4});
  auto& l0 = mlp.layers[0];
  auto& l1 = mlp.layers[1];
  auto expected = torch::tanh(x.matmul(l0.kernel.tensor()) + l0.bias->tensor())
                      .matmul(l1.kernel.tensor()) + l1.bias->tensor();
  CHECK(torch::allclose(mlp(nnx::Array(x)).local(), expected, 1e-5, 1e-6));
  CHECK_THROWS_WITH(nnx::MLP({4}, rngs), Catch::Contains("at least one layer"));
  CHECK_THROWS_WITH(nnx::MLP({4, 8, 3}, rngs, {.kernel_metadata = {{}}}),
                    Catch::Contains("1 entries for 2 layers"));

  nnx::Sequential seq{nnx::Linear(4, 8, rngs), nnx::relu, nnx::Linear(8, 3, rngs)};
  auto copy = nnx::clone(seq);
  auto& first = static_cast<nnx::Linear&>(*copy.layers[0]);
  first.kernel.set_value(nnx::Array(torch::zeros({4, 8})));
  // The clone reads its own (zeroed) kernel; the original is untouched.
  auto& last = static_cast<nnx::Linear&>(*copy.layers[2]);
  CHECK(torch::allclose(copy(nnx::Array(x)).local(), last.bias->tensor().expand({2, 3})));
  auto& orig0 = static_cast<nnx::Linear&>(*seq.layers[0]);
  auto& orig2 = static_cast<nnx::Linear&>(*seq.layers[2]);
  auto want = torch::relu(x.matmul(orig0.kernel.tensor()) + orig0.bias->tensor())
                  .matmul(orig2.kernel.tensor()) + orig2.bias->tensor();
  CHECK(torch::allclose(seq(nnx::Array(x)).local(), want, 1e-5, 1e-6));
  CHECK(seq.size() == 3);
}
