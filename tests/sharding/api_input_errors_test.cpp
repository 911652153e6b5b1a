// Bad input to the sharding API, each an error on every rank naming what is wrong and the fix,
// or JAX's value: a loss off the model's mesh, an integer loss, null meshes, set_sharding on
// values, gather of an abstract array, members given different ppermute pairs, labels outside
// the classes on a mesh, and reshape sizes below -1.
#include "../catch_after_torch.h"

#include "sharding_test_util.h"

#include <nnx/nnx.h>

#include <torch/types.h>

#include <cmath>

using Catch::Matchers::Contains;
using nnx::P;

TEST_CASE("a loss on no mesh while parameters lie on one is refused, not counted per rank",
          "[ranks2][ranks4]") {
  auto mesh = nnx::make_mesh({nnx::world_size()}, {"data"});
  nnx::MeshContext on(mesh);
  nnx::Rngs rngs(0);
  nnx::Linear model(4, 1, rngs, {.use_bias = false});
  // The loss taken through gather and wrapped anew: each rank's copy used to be summed, giving
  // world_size times the gradient.
  auto gathered = [](nnx::Linear& m) {
    return nnx::Array(nnx::gather(nnx::sum(m.kernel.value())));
  };
  CHECK_THROWS_WITH(nnx::value_and_grad(gathered, model),
                    Contains("the loss is on no mesh but 'kernel' is on") &&
                        Contains("compute the loss with nnx ops"));
  // The same loss with nnx ops: the gradient is exact.
  auto [loss, grads] =
      nnx::value_and_grad([](nnx::Linear& m) { return nnx::sum(m.kernel.value()); }, model);
  CHECK(torch::equal(nnx::gather(grads["kernel"].value()), torch::ones({4, 1})));
}

TEST_CASE("an integer loss is refused as such") {
  nnx::Rngs rngs(0);
  nnx::Linear model(4, 1, rngs);
  auto counted = [](nnx::Linear& m) { return nnx::sum(nnx::argmax(m.kernel.value(), 0, false)); };
  CHECK_THROWS_WITH(nnx::value_and_grad(counted, model),
                    Contains("the loss is Long, which has no gradient"));
}

TEST_CASE("null meshes and set_sharding on values are errors, not crashes or silent layouts") {
  auto mesh = nnx::make_mesh({nnx::world_size()}, {"data"});
  const nnx::Array placed = nnx::device_put(torch::ones({4}), {mesh, P()});
  CHECK_THROWS_WITH(nnx::redistribute(placed, nnx::NamedSharding{nullptr, P()}),
                    Contains("the target sharding names no mesh"));
  nnx::Array values(torch::ones({8, 4}));
  CHECK_THROWS_WITH(values.set_sharding(nnx::NamedSharding{mesh, P()}),
                    Contains("set_sharding lays out abstract arrays only") &&
                        Contains("device_put(x.local(), sharding)"));
  auto abstract = nnx::Array::abstract({8, 4}, at::kFloat);
  CHECK_THROWS_WITH(abstract.set_sharding(nnx::NamedSharding{nullptr, P()}),
                    Contains("the sharding names no mesh"));
  abstract.set_sharding(nnx::NamedSharding{mesh, P()});
  CHECK(abstract.mesh() == mesh);
  nnx::State state;
  state.add("w", nnx::Param(nnx::Array(torch::ones({4}))));
  CHECK_THROWS_WITH(nnx::get_named_sharding(state, nullptr),
                    Contains("get_named_sharding needs a mesh"));
  // An abstract array holds no values to gather (a replicated one gave back a meta tensor).
  CHECK_THROWS_WITH(nnx::gather(nnx::Array::abstract({4}, at::kFloat)),
                    Contains("gather needs values, and this (4,) array is abstract"));
}

TEST_CASE("members given different ppermute pairs are an error on every rank", "[ranks2]") {
  nnx_test::CheckingMode checking(false);
  auto world = nnx::Communicator::world();
  const int me = world.rank();
  // Each member its own pair: both send, nobody receives (zeros, and a stale message after).
  CHECK_THROWS_WITH(world.permute(torch::ones({2}), {{me, 1 - me}}),
                    Contains("members disagree on the collective"));
  auto shifted = world.permute(torch::full({2}, static_cast<float>(me)), {{0, 1}, {1, 0}});
  CHECK(torch::equal(shifted, torch::full({2}, static_cast<float>(1 - me))));
}

TEST_CASE("labels outside the classes give NaN on a mesh, as optax, on every rank",
          "[ranks2][ranks4]") {
  const int n = nnx::world_size();
  auto mesh = nnx::make_mesh({n}, {"data"});
  const auto logits = nnx::device_put(torch::randn({2 * n, 3}), {mesh, P("data")});
  auto labels = torch::zeros({2 * n}, torch::kLong);
  labels[2 * n - 1] = 3;  // only the last rank holds it
  const auto placed = nnx::device_put(labels, {mesh, P("data")});
  CHECK(std::isnan(nnx::gather(nnx::cross_entropy(logits, placed)).item<double>()));
  const at::Tensor each =
      nnx::gather(nnx::softmax_cross_entropy_with_integer_labels(logits, placed));
  CHECK(std::isnan(each[2 * n - 1].item<double>()));
  CHECK(torch::isfinite(each.slice(0, 0, 2 * n - 1)).all().item<bool>());
}

TEST_CASE("reshape sizes below -1, or a -1 beside a 0, are errors naming the shapes") {
  const nnx::Array four(torch::ones({4}));
  CHECK_THROWS_WITH(nnx::reshape(four, {-2, -2}),
                    Contains("sizes are >= 0, or one -1 to infer"));
  CHECK_THROWS_WITH(nnx::reshape(nnx::Array(torch::ones({0, 3})), {0, -1}),
                    Contains("the -1 cannot be inferred next to a size 0"));
  CHECK(nnx::reshape(four, {2, -1}).shape() == nnx::Shape{2, 2});
}
