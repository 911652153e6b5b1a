// Layers: Flax's defaults and key order, forward values against LibTorch, metadata, dropout
// streams in the state, and a sharded Linear.
#include "../catch_after_torch.h"

#include <nnx/nnx.h>

#include <torch/types.h>
#include <torch/utils.h>

namespace jr = nnx::random;
using nnx::initializers::Distribution;
using nnx::initializers::FanMode;

TEST_CASE("Linear draws the kernel key then the bias key from rngs.params()") {
  nnx::Rngs rngs(0);
  nnx::Linear layer(3, 4, rngs);
  auto base = jr::key(0);
  // Rngs(0) has no params stream: params() falls back to default, fold_in(key(0), count).
  auto kernel = nnx::initializers::lecun_normal().full(jr::fold_in(base, 0), {3, 4});
  CHECK(torch::equal(layer.kernel.tensor(), kernel));
  REQUIRE(layer.bias);
  CHECK(torch::equal(layer.bias->tensor(), torch::zeros({4})));
  CHECK(rngs.stream("default").counter() == 2);
  CHECK(nnx::state(layer).paths() == std::vector<std::string>{"kernel", "bias"});
  nnx::Rngs again(0);
  nnx::Linear no_bias(3, 4, again, {.use_bias = false});
  CHECK_FALSE(no_bias.bias);
  CHECK(again.stream("default").counter() == 1);
  CHECK(nnx::state(no_bias).paths() == std::vector<std::string>{"kernel"});
  auto x = torch::randn({5, 3});
  CHECK(torch::allclose(layer(nnx::Array(x)).local(), x.matmul(kernel)));
}

TEST_CASE("LinearGeneral draws the flattened kernel, takes options and checks its input") {
  nnx::Rngs rngs(0);
  nnx::LinearGeneral layer({3}, {2, 4}, rngs, {.kernel_metadata = {.out_sharding = nnx::P()}});
  // The initializer sees the [3, 8] matrix (fan_in 3), as Flax's LinearGeneral.
  auto kernel = nnx::initializers::lecun_normal().full(jr::fold_in(jr::key(0), 0), {3, 8});
  CHECK(torch::equal(layer.kernel.tensor(), kernel.reshape({3, 2, 4})));
  CHECK(layer.kernel.metadata().out_sharding == nnx::P());
  REQUIRE(layer.bias);
  auto x = torch::randn({5, 3});
  auto y = layer(nnx::Array(x)).local();
  CHECK(y.sizes() == torch::IntArrayRef{5, 2, 4});
  CHECK(torch::allclose(y, (x.matmul(kernel)).reshape({5, 2, 4}), 1e-6, 1e-6));
  nnx::Rngs again(0);
  nnx::LinearGeneral no_bias({3}, {2, 4}, again, {.use_bias = false});
  CHECK_FALSE(no_bias.bias);
  CHECK_THROWS_WITH(layer(nnx::Array(torch::randn({5, 4}))),
                    Catch::Matchers::Contains("[LinearGeneral] input (5, 4) does not end with "
                                              "the kernel's input dims (3,)"));
}

TEST_CASE("LoRALinear's adapter is LoRAParam and attention draws eight keys") {
  // Values are compared with Flax itself by tests/peers (flax_peer); these are the structure.
  nnx::Rngs rngs(0);
  nnx::LoRALinear layer(3, 4, 2, rngs);
  CHECK(nnx::state(layer).paths() ==
        std::vector<std::string>{"kernel", "bias", "lora.lora_a", "lora.lora_b"});
  CHECK(nnx::state(layer, nnx::OfType<nnx::LoRAParam>).size() == 2);
  nnx::Rngs attention_rngs(0);
  nnx::MultiHeadAttention mha(2, 4, attention_rngs);
  CHECK(mha.out.kernel.shape() == nnx::Shape{2, 2, 4});
  CHECK(attention_rngs.stream("default").counter() == 8);
}

TEST_CASE("Embed uses variance_scaling(1, fan_in, normal, out_axis=0) and attend ties weights") {
  nnx::Rngs rngs(0);
  nnx::Embed embed(32, 8, rngs);
  auto init = nnx::initializers::variance_scaling(1.0, FanMode::fan_in, Distribution::normal,
                                                  {.out_axis = {0}});
  auto table = init.full(jr::fold_in(jr::key(0), 0), {32, 8});
  CHECK(torch::equal(embed.embedding.tensor(), table));
  // fan_in is the feature count: stddev 1/sqrt(8).
  CHECK(embed.embedding.tensor().std().item<double>() == Approx(1 / std::sqrt(8.0)).margin(0.06));
  auto ids = torch::tensor({3, 0, 31}, torch::kLong);
  CHECK(torch::equal(embed(nnx::Array(ids)).local(), table.index_select(0, ids)));
  auto q = torch::randn({2, 8});
  CHECK(torch::allclose(embed.attend(nnx::Array(q)).local(), q.matmul(table.t())));
}

TEST_CASE("LayerNorm and RMSNorm match their formulas with Flax's epsilon") {
  nnx::Rngs rngs(0);
  nnx::LayerNorm ln(6, rngs);
  nnx::RMSNorm rms(6, rngs);
  auto x = torch::randn({4, 6});
  auto expected_ln = torch::layer_norm(x, {6}, {}, {}, 1e-6);
  CHECK(torch::allclose(ln(nnx::Array(x)).local(), expected_ln, 1e-5, 1e-5));
  auto expected_rms = x * (x.pow(2).mean(-1, true) + 1e-6).rsqrt();
  CHECK(torch::allclose(rms(nnx::Array(x)).local(), expected_rms, 1e-5, 1e-5));
  CHECK(nnx::state(ln).paths() == std::vector<std::string>{"scale", "bias"});
}

TEST_CASE("Dropout forks its stream at construction and keys each call from it") {
  nnx::Rngs rngs(0, {{"dropout", 7}});
  nnx::Dropout drop(0.5, rngs);
  auto forked = jr::fold_in(jr::key(7), 0);  // the stream's first key seeds the fork
  CHECK(drop.rngs.base_key() == forked);
  auto x = nnx::Array(torch::ones({4, 8}));
  auto y = drop(x);
  auto expected = nnx::dropout(x, 0.5, jr::fold_in(forked, 0));
  CHECK(torch::equal(y.local(), expected.local()));
  CHECK(nnx::state(drop, nnx::OfType<nnx::RngCount>).paths() ==
        std::vector<std::string>{"rngs.count"});
  drop.eval();
  CHECK(torch::equal(drop(x).local(), x.local()));
}

TEST_CASE("Dropout takes Flax's deterministic and rng_collection options") {
  auto x = nnx::Array(torch::ones({4, 8}));
  nnx::Rngs rngs(0, {{"other", 7}});
  nnx::Dropout fixed(0.5, rngs, {.deterministic = true});
  CHECK(torch::equal(fixed(x).local(), x.local()));  // training mode, yet the identity
  nnx::Dropout drop(0.5, rngs, {.rng_collection = "other"});
  // "other"'s first key: `fixed` forked "dropout", which this Rngs lacks, so it drew "default".
  auto forked = jr::fold_in(jr::key(7), 0);
  CHECK(drop.rngs.base_key() == forked);
  CHECK(torch::equal(drop(x).local(), nnx::dropout(x, 0.5, jr::fold_in(forked, 0)).local()));
}

TEST_CASE("layers take a temporary Rngs, as Flax's rngs=nnx.Rngs(0)") {
  nnx::Rngs rngs(0);
  nnx::Linear from_named(2, 3, rngs);
  nnx::Linear from_temporary(2, 3, nnx::Rngs(0));
  CHECK(torch::equal(from_named.kernel.tensor(), from_temporary.kernel.tensor()));
  nnx::Rngs embed_rngs(1);
  CHECK(torch::equal(nnx::Embed(10, 4, nnx::Rngs(1)).embedding.tensor(),
                     nnx::Embed(10, 4, embed_rngs).embedding.tensor()));
  nnx::Rngs mlp_rngs(2);
  nnx::MLP named_mlp({4, 8, 2}, mlp_rngs);
  nnx::MLP temporary_mlp({4, 8, 2}, nnx::Rngs(2));
  auto x = nnx::Array(torch::randn({3, 4}));
  CHECK(torch::equal(named_mlp(x).local(), temporary_mlp(x).local()));
  nnx::Dropout drop(0.1, nnx::Rngs(0, {{"dropout", 3}}), {.deterministic = true});
  CHECK(drop.deterministic);
}

TEST_CASE("layer metadata options annotate the variables") {
  nnx::Rngs rngs(0);
  nnx::Linear layer(4, 8, rngs, {.kernel_metadata = {.out_sharding = nnx::P("embed", "mlp")},
                                 .bias_metadata = {.out_sharding = nnx::P("mlp")}});
  nnx::LogicalAxisRules rules({{"embed", nnx::none}, {"mlp", "model"}});
  auto specs = nnx::get_partition_spec(nnx::state(layer));
  CHECK(specs[0].second == nnx::P(nnx::none, "model"));
  CHECK(specs[1].second == nnx::P("model"));
}

TEST_CASE("a column-sharded Linear gives the one-device output", "[ranks2][ranks4][ranks8]") {
  auto mesh = nnx::make_mesh({nnx::world_size()}, {"model"});
  nnx::Rngs rngs(0);
  nnx::Linear layer(4, 8 * nnx::world_size(), rngs);
  torch::manual_seed(0);  // the same x on every rank (LibTorch seeds each process at random)
  auto x = torch::randn({3, 4});
  // The one-device output on the mesh's device (a GPU's GEMM rounds differently from the CPU's).
  const auto device = mesh->device();
  auto expected = (torch::addmm(layer.bias->tensor().to(device), x.to(device),
                                layer.kernel.tensor().to(device)))
                      .cpu();
  layer.kernel.set_value(
      nnx::device_put(layer.kernel.tensor(), {mesh, nnx::P(nnx::none, "model")}));
  layer.bias->set_value(nnx::device_put(layer.bias->tensor(), {mesh, nnx::P("model")}));
  auto y = layer(nnx::device_put(x, {mesh, nnx::P()}));
  CHECK(y.spec() == nnx::P(nnx::none, "model"));
  const auto whole = nnx::gather(y).cpu();
  INFO("largest difference " << (whole - expected).abs().max().item<double>());
  CHECK(torch::allclose(whole, expected));
}

TEST_CASE("Sequential::get returns a layer as its type, or names what it is") {
  nnx::Rngs rngs(0);
  nnx::Sequential model{nnx::Linear(4, 8, rngs), nnx::relu, nnx::LayerNorm(8, rngs)};
  CHECK(model.get<nnx::Linear>(0).kernel.shape() == nnx::Shape{4, 8});
  model.get<nnx::LayerNorm>(2).epsilon = 1e-3;
  CHECK(static_cast<const nnx::LayerNorm&>(*model.layers[2]).epsilon == 1e-3);
  CHECK_THROWS_WITH(model.get<nnx::LayerNorm>(0),
                    Catch::Matchers::Contains("layer 0 is a Linear"));
  CHECK_THROWS_WITH(model.get<nnx::Linear>(1),
                    Catch::Matchers::Contains("layer 1 is a function, not a module"));
  CHECK_THROWS_WITH(model.get<nnx::Linear>(3), Catch::Matchers::Contains("there are 3 layers"));
}

TEST_CASE("a Sequential nests in another and holds layers that update their state") {
  nnx::Rngs rngs(0);
  nnx::Sequential inner{nnx::Linear(4, 8, rngs), nnx::relu};
  // A non-const Sequential as the first of several layers used to recurse without end.
  nnx::Sequential outer{inner, nnx::Linear(8, 2, rngs)};
  CHECK(outer.size() == 2);
  CHECK(nnx::state(outer).paths() ==
        std::vector<std::string>{"layers.0.layers.0.kernel", "layers.0.layers.0.bias",
                                 "layers.1.kernel", "layers.1.bias"});
  auto x = torch::randn({3, 4});
  const auto& l0 = inner.get<nnx::Linear>(0);
  const auto& l1 = outer.get<nnx::Linear>(1);
  auto want = torch::relu(x.matmul(l0.kernel.tensor()) + l0.bias->tensor())
                  .matmul(l1.kernel.tensor()) + l1.bias->tensor();
  CHECK(torch::allclose(outer(nnx::Array(x)).local(), want, 1e-5, 1e-6));
  nnx::Sequential copied(inner);  // the copy constructor, not a Sequential of one Sequential
  CHECK(copied.size() == 2);
  CHECK(nnx::state(copied).paths() == nnx::state(inner).paths());

  nnx::Sequential stateful{nnx::Linear(4, 3, rngs), nnx::BatchNorm(3, rngs),
                           nnx::Dropout(0.5, rngs)};
  const nnx::Array y = stateful(nnx::Array(x));
  const auto& norm = stateful.get<nnx::BatchNorm>(1);
  const auto h = x.matmul(stateful.get<nnx::Linear>(0).kernel.tensor()) +
                 stateful.get<nnx::Linear>(0).bias->tensor();
  // The running mean moved 1% of the way to the batch mean; dropout kept or doubled each value.
  CHECK(torch::allclose(norm.mean.tensor(), h.mean(0) * 0.01, 1e-5, 1e-6));
  const auto normalized = (h - h.mean(0)) / (h.var(0, false) + 1e-5).sqrt();
  const auto kept = y.local() != 0;
  CHECK(kept.any().item<bool>());
  CHECK(torch::allclose(y.local().masked_select(kept), (normalized * 2).masked_select(kept), 1e-3,
                        1e-4));
}

TEST_CASE("l2_loss is optax's: half the squared difference, elementwise") {
  auto p = torch::tensor({1.f, 2.f, -3.f});
  auto t = torch::tensor({0.f, 4.f, -3.f});
  CHECK(torch::equal(nnx::l2_loss(nnx::Array(p), nnx::Array(t)).local(),
                     torch::tensor({0.5f, 2.f, 0.f})));
  CHECK(torch::equal(nnx::l2_loss(nnx::Array(p)).local(), torch::tensor({0.5f, 2.f, 4.5f})));
}
