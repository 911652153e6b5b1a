// Bad input to the sharding API, each an error on every rank naming what is wrong and the fix,
// or JAX's value: a loss off the model's mesh, an integer loss, null meshes, set_sharding on
// values, gather of an abstract array, members given different ppermute pairs, labels outside
// the classes on a mesh, negative integer powers, reshape sizes below -1, processes whose
// tensors differ in shape where the API assumes they agree, and (in debug mode) shard_map
// outputs that are not replicated as their out specs say.
#include "../catch_after_torch.h"

#include "sharding_test_util.h"

#include <nnx/nnx.h>

#include <torch/types.h>

#include <cmath>
#include <numeric>
#include <vector>

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

TEST_CASE("integers raised to a negative whole power are an error naming the fix, as in JAX") {
  const nnx::Array ints(torch::tensor({1, 2, 3}, torch::kInt));
  CHECK_THROWS_WITH(nnx::power(ints, -1.0),
                    Contains("[power] int32 values cannot be raised to the negative power -1") &&
                        Contains("nnx::astype(x, at::kFloat)"));
  CHECK_THROWS_WITH(nnx::power(nnx::Array(torch::ones({2}, torch::kBool)), -2.0),
                    Contains("negative power"));
  // A fractional negative power promotes, as jnp.power(x, -0.5); floats take any power.
  CHECK(torch::allclose(nnx::power(ints, -0.5).local(), torch::tensor({1.0, 2.0, 3.0}).rsqrt()));
  CHECK(torch::equal(nnx::power(nnx::astype(ints, at::kFloat), -1.0).local(),
                     torch::tensor({1.0f, 0.5f, 1.0f / 3})));
}

TEST_CASE("a vector operand of matmul whose size differs from the inner dim is named as given") {
  const nnx::Array vector(torch::ones({5})), matrix(torch::ones({4, 3}));
  CHECK_THROWS_WITH(nnx::matmul(vector, matrix),
                    Contains("[matmul] inner dims differ: (5,) @ (4, 3) (5 vs 4)"));
  CHECK_THROWS_WITH(nnx::matmul(nnx::Array(torch::ones({3, 4})), vector),
                    Contains("[matmul] inner dims differ: (3, 4) @ (5,) (4 vs 5)"));
  CHECK_THROWS_WITH(nnx::matmul(nnx::Array(torch::tensor(2.0f)), vector),
                    Contains("[matmul] needs arrays of rank >= 1"));
  CHECK(nnx::matmul(vector, nnx::Array(torch::ones({5, 2}))).shape() == nnx::Shape{2});
}

TEST_CASE("reshape sizes below -1, or a -1 beside a 0, are errors naming the shapes") {
  const nnx::Array four(torch::ones({4}));
  CHECK_THROWS_WITH(nnx::reshape(four, {-2, -2}),
                    Contains("sizes are >= 0, or one -1 to infer"));
  CHECK_THROWS_WITH(nnx::reshape(nnx::Array(torch::ones({0, 3})), {0, -1}),
                    Contains("the -1 cannot be inferred next to a size 0"));
  CHECK(nnx::reshape(four, {2, -1}).shape() == nnx::Shape{2, 2});
}

TEST_CASE("processes passing tensors of different shapes to device_put or "
          "make_array_from_process_local_data all get an error naming each one's",
          "[ranks2][ranks4]") {
  nnx_test::CheckingMode checking(false);  // checked outside debug mode too
  const int n = nnx::world_size(), me = nnx::world_rank();
  auto mesh = nnx::make_mesh({n}, {"data"});
  // The last rank's batch is one row short: its global shape would differ from the others'.
  const int64_t rows = me == n - 1 ? 3 : 4;
  std::vector<int> first(n - 1);
  std::iota(first.begin(), first.end(), 0);
  const std::string others = fmt::format("rank{} {}", n > 2 ? "s" : "", fmt::join(first, ", "));
  CHECK_THROWS_WITH(
      nnx::make_array_from_process_local_data({mesh, P("data")}, torch::ones({rows, 2})),
      Contains("the processes passed local blocks of different dtypes or shapes") &&
          Contains(fmt::format("({}: float32 (4, 2); rank {}: float32 (3, 2))", others, n - 1)) &&
          Contains("pad a short last batch and mask it"));
  CHECK_THROWS_WITH(nnx::device_put(torch::ones({rows * n, 2}), {mesh, P("data")}),
                    Contains("[device_put] the processes passed whole tensors") &&
                        Contains(fmt::format("({}: float32 ({}, 2); rank {}: float32 ({}, 2))",
                                             others, 4 * n, n - 1, 3 * n)));
  // A dtype alone differing is named too.
  const auto dtype = me == 0 ? torch::kDouble : torch::kFloat;
  CHECK_THROWS_WITH(nnx::device_put(torch::ones({n}, dtype), {mesh, P()}),
                    Contains("rank 0: float64 (") && Contains("float32 ("));
  // An undefined tensor on one rank is named on every rank (it used to throw there alone).
  const at::Tensor maybe = me == n - 1 ? at::Tensor() : torch::ones({n});
  CHECK_THROWS_WITH(nnx::device_put(maybe, {mesh, P()}),
                    Contains(fmt::format("rank {}: an undefined tensor", n - 1)));
  // Values may differ (tests and users slice rank-specific data this way); shapes may not.
  CHECK(nnx::device_put(torch::full({n}, me), {mesh, P("data")}).local().item<int64_t>() == me);
  // Agreeing processes still place their blocks, and the mesh is usable after the errors.
  auto placed = nnx::make_array_from_process_local_data(
      {mesh, P("data")}, torch::full({2, 2}, static_cast<float>(me)));
  CHECK(placed.shape() == nnx::Shape{2 * n, 2});
  CHECK(nnx::gather(nnx::sum(placed)).item<float>() == 4.0f * n * (n - 1) / 2);
}

TEST_CASE("a device_put spec naming an axis the mesh lacks says specs name mesh axes there") {
  auto mesh = nnx::make_mesh({nnx::world_size()}, {"data"});
  CHECK_THROWS_WITH(nnx::device_put(torch::ones({4}), {mesh, P("batch")}),
                    Contains("names axis 'batch', which Mesh('data': 1) does not have; use one "
                             "of (data) (here a spec names mesh axes, not logical names)"));
}

TEST_CASE("in debug mode shard_map refuses an output its out spec calls replicated where it "
          "differs, and outputs whose shapes differ", "[ranks2][ranks4]") {
  nnx_test::CheckingMode checking(true);
  const int n = nnx::world_size();
  auto mesh = nnx::make_mesh({n}, {"i"});
  const auto x = torch::arange(2 * n, torch::kFloat);
  // Each member's own block, declared replicated (P()): JAX refuses this from the types.
  auto unreduced = nnx::shard_map([](at::Tensor b) { return b.sum(0, true); }, mesh, {P("i")},
                                  P());
  CHECK_THROWS_WITH(unreduced(x),
                    Contains("[shard_map output 0] out spec PartitionSpec() leaves out mesh axes "
                             "(i), so the output must be equal along them, but rank 1 holds a "
                             "value unlike rank 0's; reduce it over those axes"));
  // Reduced, it is replicated; named in the out spec, it may differ.
  auto reduced = nnx::shard_map([](at::Tensor b) { return nnx::psum(b.sum(0, true), "i"); },
                                mesh, {P("i")}, P());
  CHECK(nnx::gather(reduced(x)).item<float>() == static_cast<float>(n * (2 * n - 1)));
  auto blocks = nnx::shard_map([](at::Tensor b) { return b.sum(0, true); }, mesh, {P("i")},
                               P("i"));
  CHECK(blocks(x).shape() == nnx::Shape{n});
  // -0.0 and 0.0 are the same value.
  auto zeros = nnx::shard_map(
      [](at::Tensor b) { return b.narrow(0, 0, 1) * 0 * (nnx::axis_index("i") % 2 ? -1 : 1); },
      mesh, {P("i")}, P());
  CHECK(nnx::gather(zeros(x)).item<float>() == 0.0f);
  // A body whose output shape depends on the member.
  auto ragged = nnx::shard_map(
      [](at::Tensor b) { return b.narrow(0, 0, nnx::axis_index("i") == 0 ? 2 : 1); }, mesh,
      {P("i")}, P("i"));
  CHECK_THROWS_WITH(ragged(x), Contains("[shard_map output 0] the processes passed outputs of "
                                        "different dtypes or shapes (rank 0: float32 (2,); rank"));
  // The second output of a tuple is named as such.
  auto pair = nnx::shard_map(
      [](at::Tensor b) { return std::make_tuple(nnx::psum(b, "i"), b * 2); }, mesh, {P("i")},
      std::vector{P(), P()});
  CHECK_THROWS_WITH(pair(x), Contains("[shard_map output 1] out spec PartitionSpec() leaves out"));
}

TEST_CASE("debug mode's replication check follows the axes the out spec leaves out",
          "[ranks4]") {
  nnx_test::CheckingMode checking(true);
  auto mesh = nnx::make_mesh({2, 2}, {"a", "b"});
  const auto x = torch::arange(4, torch::kFloat).reshape({2, 2});
  // Summed over b, each row is equal along b and differs along a, as P("a") says.
  auto rows = nnx::shard_map([](at::Tensor blk) { return nnx::psum(blk, "b"); }, mesh,
                             {P("a", "b")}, P("a"));
  CHECK(torch::equal(nnx::gather(rows(x)), torch::tensor({1.0f, 5.0f}).reshape({2, 1})));
  // Summed over a instead, it still differs along b, which P("a") leaves out.
  auto columns = nnx::shard_map([](at::Tensor blk) { return nnx::psum(blk, "a"); }, mesh,
                                {P("a", "b")}, P("a"));
  CHECK_THROWS_WITH(columns(x), Contains("leaves out mesh axes (b)") &&
                                    Contains("rank 1 holds a value unlike rank 0's"));
}
