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

TEST_CASE("norms take the statistics of 16-bit inputs in float32, as Flax does") {
  // [99, 101]: mean 100, variance 1. In bfloat16, E[x^2] and E[x]^2 round to one value, and the
  // variance to 0: the outputs were +-316 (BatchNorm) and +-1000 (LayerNorm).
  nnx::Rngs rngs(0);
  const auto row = torch::tensor({{99.f, 101.f}});
  const auto want = torch::tensor({{-1.f, 1.f}});
  for (auto half : {bf16, torch::kHalf}) {
    INFO(c10::toString(half));
    nnx::LayerNorm layer_norm(2, rngs);
    nnx::Array y = layer_norm(nnx::Array(row.to(half)));
    CHECK(y.dtype() == torch::kFloat);  // float32 parameters: the output promotes to them
    CHECK(torch::allclose(y.local(), want, 1e-4, 1e-4));
    nnx::LayerNorm plain(2, rngs, {.use_scale = false, .use_bias = false});
    y = plain(nnx::Array(row.to(half)));
    CHECK(y.dtype() == half);
    CHECK(torch::allclose(y.local().to(torch::kFloat), want, 1e-2, 1e-2));
    nnx::RMSNorm rms(2, rngs, {.use_scale = false});
    y = rms(nnx::Array(row.to(half)));
    CHECK(y.dtype() == half);
    CHECK(torch::equal(y.local(), (row * row.square().mean(-1, true).add(1e-6).rsqrt()).to(half)));

    nnx::BatchNorm batch_norm(1, rngs);
    y = batch_norm(nnx::Array(row.t().to(half)));
    CHECK(y.dtype() == torch::kFloat);
    CHECK(torch::allclose(y.local(), want.t(), 1e-4, 1e-4));
    // Running averages (momentum 0.99) of mean 100 and variance 1.
    CHECK(batch_norm.mean.tensor().item<float>() == Approx(1.0f));
    CHECK(batch_norm.var.tensor().item<float>() == Approx(1.0f));
  }
}

TEST_CASE("Linear and LinearGeneral without dtype promote the input and parameters together") {
  // Flax's promote_dtype: a bfloat16 input meets float32 parameters in float32 (it was an
  // error); one example without a batch dim gives one output row.
  nnx::Rngs rngs(0);
  nnx::Linear layer(3, 4, rngs);
  const auto x = torch::randn({2, 3});
  const auto want = torch::addmm(layer.bias->tensor(), as_bf16(x).to(torch::kFloat),
                                 layer.kernel.tensor());
  nnx::Array y = layer(nnx::Array(as_bf16(x)));
  CHECK(y.dtype() == torch::kFloat);
  CHECK(torch::allclose(y.local(), want, 1e-6, 1e-6));
  nnx::Array one = layer(nnx::Array(x[1]));
  CHECK(one.shape() == nnx::Shape{4});
  const auto rows = torch::addmm(layer.bias->tensor(), x, layer.kernel.tensor());
  CHECK(torch::allclose(one.local(), rows[1], 1e-6, 1e-6));
  nnx::Linear plain(3, 4, rngs, {.use_bias = false});
  CHECK(torch::allclose(plain(nnx::Array(x.to(torch::kDouble))).local(),
                        x.to(torch::kDouble).matmul(plain.kernel.tensor().to(torch::kDouble))));

  nnx::LinearGeneral general({3}, {2, 2}, rngs);
  const auto flat_kernel = general.kernel.tensor().reshape({3, 4});
  const auto general_want =
      (as_bf16(x).to(torch::kFloat).matmul(flat_kernel)).reshape({2, 2, 2}) +
      general.bias->tensor();
  nnx::Array g = general(nnx::Array(as_bf16(x)));
  CHECK(g.dtype() == torch::kFloat);
  CHECK(torch::allclose(g.local(), general_want, 1e-6, 1e-6));
  nnx::Array g1 = general(nnx::Array(x[0]));
  CHECK(g1.shape() == nnx::Shape{2, 2});
  CHECK(torch::allclose(g1.local(),
                        x[0].matmul(flat_kernel).reshape({2, 2}) + general.bias->tensor(), 1e-6,
                        1e-6));
}

TEST_CASE("Conv promotes its input and parameters, takes a dtype, and any batch dims or none") {
  nnx::Rngs rngs(0);
  nnx::Conv conv(3, 4, {3, 3}, rngs);
  conv.bias->tensor().uniform_();  // zeros would hide a missing bias
  const auto x = torch::randn({2, 5, 5, 3});
  // NHWC through torch's NCHW convolution, "SAME" padding for a 3x3 kernel.
  auto reference = [&](const torch::Tensor& input, const torch::Tensor& k, const torch::Tensor& b) {
    return torch::conv2d(input.permute({0, 3, 1, 2}), k.permute({3, 2, 0, 1}), b, 1, 1)
        .permute({0, 2, 3, 1});
  };
  const auto want = reference(as_bf16(x).to(torch::kFloat), conv.kernel.tensor(),
                              conv.bias->tensor());
  nnx::Array y = conv(nnx::Array(as_bf16(x)));  // bfloat16 meets float32 parameters: float32
  CHECK(y.dtype() == torch::kFloat);
  CHECK(torch::allclose(y.local(), want, 1e-5, 1e-5));

  nnx::Conv low(3, 4, {3, 3}, rngs, {.dtype = bf16});
  low.bias->tensor().uniform_();
  nnx::Array z = low(nnx::Array(x));
  CHECK(z.dtype() == bf16);
  // The bias added after the convolution, each rounded to bfloat16 as the layer rounds them.
  CHECK(torch::equal(z.local(), reference(as_bf16(x), as_bf16(low.kernel.tensor()), {}) +
                                    as_bf16(low.bias->tensor())));

  nnx::Array one = conv(nnx::Array(x[1]));
  CHECK(one.shape() == nnx::Shape{5, 5, 4});
  CHECK(torch::allclose(one.local(), reference(x, conv.kernel.tensor(), conv.bias->tensor())[1],
                        1e-5, 1e-5));
  // Two batch dims, flattened and restored as in Flax.
  nnx::Array two = conv(nnx::Array(x.reshape({1, 2, 5, 5, 3})));
  CHECK(two.shape() == nnx::Shape{1, 2, 5, 5, 4});
  CHECK(torch::equal(two.local()[0], conv(nnx::Array(x)).local()));
  CHECK_THROWS_WITH(conv(nnx::Array(x[0][0])),
                    Catch::Matchers::Contains("Conv takes [..., height, width, features]"));
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
