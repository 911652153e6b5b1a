// Mixed precision as in Flax: a layer's `dtype` casts its inputs and float32 parameters for the
// computation, the outputs come in that dtype, and the gradients come back in float32.
#include "../catch_after_torch.h"

#include <nnx/nnx.h>

#include <torch/types.h>

namespace {
const auto bf16 = torch::kBFloat16;
torch::Tensor as_bf16(const torch::Tensor& t) { return t.to(bf16); }
}  // namespace

TEST_CASE("a Linear with dtype bfloat16 computes in bfloat16 and returns float32 gradients") {
  nnx::Rngs rngs(0);
  nnx::Linear layer(3, 4, rngs, {.dtype = bf16});
  CHECK(layer.kernel.dtype() == torch::kFloat);
  auto x = torch::randn({2, 3});
  nnx::Array y = layer(nnx::Array(x));
  CHECK(y.dtype() == bf16);
  auto expected = torch::addmm(as_bf16(layer.bias->tensor()), as_bf16(x), as_bf16(layer.kernel.tensor()));
  CHECK(torch::equal(y.local(), expected));
  auto [loss, grads] = nnx::value_and_grad(
      [&](nnx::Linear& m) { return nnx::astype(nnx::sum(m(nnx::Array(x))), torch::kFloat); }, layer);
  CHECK(grads.at("kernel").value().dtype() == torch::kFloat);
  // d(sum(x @ k + b))/dk = x^T 1: exact in bfloat16 for these inputs' bfloat16 values.
  CHECK(torch::equal(grads.at("kernel").value().local(),
                     as_bf16(x).t().matmul(torch::ones({2, 4}, bf16)).to(torch::kFloat)));
  CHECK(torch::equal(grads.at("bias").value().local(), torch::full({4}, 2.f)));
}

TEST_CASE("LayerNorm with dtype computes its statistics in float32 and returns that dtype") {
  nnx::Rngs rngs(0);
  nnx::LayerNorm norm(8, rngs, {.dtype = bf16});
  auto x = torch::randn({3, 8}) * 5 + 100;  // large mean: bfloat16 statistics would lose it
  nnx::Array y = norm(nnx::Array(as_bf16(x)));
  CHECK(y.dtype() == bf16);
  auto expected = torch::layer_norm(as_bf16(x).to(torch::kFloat), {8}, norm.scale->tensor(),
                                    norm.bias->tensor(), 1e-6);
  CHECK(torch::equal(y.local(), as_bf16(expected)));
}

TEST_CASE("attention, MLP and Embed with dtype bfloat16 return bfloat16") {
  nnx::Rngs rngs(0);
  nnx::MultiHeadAttention attention(2, 8, rngs, {.dtype = bf16});
  nnx::MLP mlp({8, 16, 8}, rngs, {.dtype = bf16});
  nnx::Embed embed(10, 8, rngs, {.dtype = bf16});
  nnx::Array tokens(torch::tensor({{1, 2, 3}}, torch::kLong));
  nnx::Array h = embed(tokens);
  CHECK(h.dtype() == bf16);
  CHECK(torch::equal(h.local()[0][1], as_bf16(embed.embedding.tensor()[2])));
  h = attention(h, true);
  CHECK(h.dtype() == bf16);
  h = mlp(h);
  CHECK(h.dtype() == bf16);
  nnx::Array logits = embed.attend(h);
  CHECK(logits.dtype() == bf16);
  CHECK(logits.shape() == nnx::Shape{1, 3, 10});
  CHECK(torch::equal(logits.local(), h.local().matmul(as_bf16(embed.embedding.tensor()).t())));
}
