// Bad sizes and inputs given to layers and their ops: each an error naming the layer or op, what
// it expects and the fix, never LibTorch's own exception or a crash; ids and labels of any
// integer dtype; dropout at rate 1.
#include "../catch_after_torch.h"

#include <nnx/nnx.h>

#include <torch/types.h>

#include <cmath>
#include <functional>
#include <limits>

using Catch::Matchers::Contains;

TEST_CASE("negative layer sizes are errors naming the layer and the argument") {
  nnx::Rngs rngs(0);
  CHECK_THROWS_WITH(nnx::Linear(4, -8, rngs),
                    Contains("Linear's out_features must not be negative, got -8"));
  CHECK_THROWS_WITH(nnx::Linear(-4, 8, rngs), Contains("Linear's in_features"));
  CHECK_THROWS_WITH(nnx::Embed(-1, 8, rngs), Contains("Embed's num_embeddings"));
  CHECK_THROWS_WITH(nnx::BatchNorm(-1, rngs),
                    Contains("BatchNorm's num_features must not be negative"));
  CHECK_THROWS_WITH(nnx::LayerNorm(-1, rngs), Contains("LayerNorm's num_features"));
  CHECK_THROWS_WITH(nnx::RMSNorm(-2, rngs), Contains("RMSNorm's num_features"));
  CHECK_THROWS_WITH(nnx::LoRA(4, -2, 8, rngs), Contains("LoRA's lora_rank must not be negative"));
  CHECK_THROWS_WITH(nnx::LoRALinear(4, 8, -2, rngs), Contains("LoRA's lora_rank"));
}

TEST_CASE("inputs a layer cannot take are errors naming what it expects") {
  nnx::Rngs rngs(0);
  nnx::Linear linear(4, 8, rngs);
  CHECK_THROWS_WITH(linear(nnx::Array(torch::ones({2, 5}))),
                    Contains("this Linear takes inputs [..., 4] (in_features), got (2, 5)"));
  CHECK(linear(nnx::Array(torch::ones({4}))).shape() == nnx::Shape{8});
  // LoRALinear takes one example [in] as Linear does, giving the row of a batch of one.
  nnx::LoRALinear lora_linear(4, 8, 2, rngs, {}, {.b_initializer = nnx::initializers::ones()});
  const at::Tensor example = torch::randn({4});
  const nnx::Array one = lora_linear(nnx::Array(example));
  CHECK(one.shape() == nnx::Shape{8});
  CHECK(torch::equal(one.local(), lora_linear(nnx::Array(example.unsqueeze(0))).local()[0]));
  CHECK_THROWS_WITH(lora_linear.lora(nnx::Array(torch::ones({2, 5}))),
                    Contains("this LoRA takes inputs [..., 4] (in_features), got (2, 5)"));
  const nnx::Array scalar(torch::tensor(1.0f));
  nnx::LayerNorm norm(4, rngs);
  CHECK_THROWS_WITH(norm(scalar), Contains("layer_norm normalizes x [..., features]; got a 0-d"));
  nnx::RMSNorm rms(4, rngs);
  CHECK_THROWS_WITH(rms(scalar), Contains("rms_norm normalizes x [..., features]"));
  // Statistics over no dims were taken over the features instead, and moved the running mean.
  nnx::BatchNorm batch_norm(6, rngs);
  CHECK_THROWS_WITH(batch_norm(nnx::Array(torch::randn({6}))),
                    Contains("input (6,) has none; give it a batch dim ([1, 6])"));
  CHECK(torch::equal(batch_norm.mean.tensor(), torch::zeros({6})));
  CHECK(batch_norm(nnx::Array(torch::randn({1, 6}))).shape() == nnx::Shape{1, 6});
  nnx::Conv conv(3, 8, {3, 3}, rngs, {.padding = "VALID"});
  CHECK_THROWS_WITH(conv(nnx::Array(torch::ones({1, 2, 2, 3}))),
                    Contains("the kernel's 3x3 window must fit the input's height and width, "
                             "2x2; pad the input or use SAME"));
  CHECK(conv(nnx::Array(torch::ones({1, 3, 4, 3}))).shape() == nnx::Shape{1, 1, 2, 8});
  const std::function<nnx::Array(const nnx::Array&)> nothing;
  CHECK_THROWS_WITH((nnx::Sequential{nnx::Linear(4, 8, rngs), nothing}),
                    Contains("step 1 of this Sequential is an empty function"));
}

TEST_CASE("ids and labels of any integer dtype are taken; labels outside the classes say so") {
  nnx::Rngs rngs(0);
  nnx::Embed embed(5, 3, rngs);
  const at::Tensor table = embed.embedding.tensor();
  // uint8, as IdxFile gives labels, and int16 counting from the end.
  CHECK(torch::equal(embed(nnx::Array(torch::tensor({4, 0, 2}, torch::kByte))).local(),
                     table.index_select(0, torch::tensor({4, 0, 2}))));
  CHECK(torch::equal(embed(nnx::Array(torch::tensor({-1, 1}, torch::kShort))).local(),
                     table.index_select(0, torch::tensor({4, 1}))));
  CHECK_THROWS_WITH(embed(nnx::Array(torch::tensor({true, false}))),
                    Contains("ids must be integers"));
  const nnx::Array logits(torch::randn({2, 3}));
  for (const auto& labels : {torch::tensor({0, 3}), torch::tensor({-1, 0})}) {
    CHECK_THROWS_WITH(nnx::cross_entropy(logits, nnx::Array(labels)),
                      Contains("[cross_entropy] a label lies outside [0, 3) for 3 classes"));
    CHECK_THROWS_WITH(
        nnx::softmax_cross_entropy_with_integer_labels(logits, nnx::Array(labels)),
        Contains("a label lies outside [0, 3)"));
  }
}

TEST_CASE("dropout at rate 1 gives zeros where the input is infinite or NaN too, as Flax") {
  const double inf = std::numeric_limits<double>::infinity();
  const auto x = torch::tensor({inf, -1.0, std::nan(""), 2.0}).requires_grad_();
  const at::Tensor y = nnx::dropout(nnx::Array(x), 1.0, nnx::random::key(0)).local();
  CHECK(torch::equal(y, torch::zeros({4})));
  y.sum().backward();
  CHECK(torch::equal(x.grad(), torch::zeros({4})));
}
