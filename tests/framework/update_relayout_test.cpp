// nnx::update keeps each variable's layout: a value laid out differently is moved into it (every
// pair of layouts on a 2x2 mesh), a whole value is sliced into its blocks, and a value on another
// mesh is refused, naming the path and both layouts, with nothing updated.
#include "../catch_after_torch.h"

#include <nnx/nnx.h>

#include <torch/types.h>

using Catch::Matchers::Contains;
using nnx::P;

namespace {
struct Holder : nnx::Module {
  nnx::Param NNX_FIELD(w);
  explicit Holder(nnx::Array value) : w(std::move(value)) {}
};

nnx::State state_of(nnx::Array value) {
  nnx::State s;
  s.add("w", nnx::Param(std::move(value)));
  return s;
}
}  // namespace

TEST_CASE("update moves a value into the variable's layout, for every pair of layouts", "[ranks4]") {
  auto mesh = nnx::make_mesh({2, 2}, {"a", "b"});
  const std::vector<nnx::PartitionSpec> layouts = {P(), P("a"), P("b"), P({"a", "b"}),
                                                   P(nnx::none, "a"), P("b", "a")};
  const auto old_value = torch::arange(16, torch::kFloat).reshape({4, 4});
  const auto new_value = 100 + torch::arange(16, torch::kFloat).reshape({4, 4}) * 3;
  int pairs = 0;
  for (const auto& target : layouts)
    for (const auto& source : layouts) {
      INFO("target " << target.to_string() << ", source " << source.to_string());
      Holder model(nnx::device_put(old_value, {mesh, target}));
      const at::Tensor storage = model.w.tensor();
      nnx::update(model, state_of(nnx::device_put(new_value, {mesh, source})));
      CHECK(model.w.value().spec() == nnx::device_put(old_value, {mesh, target}).spec());
      CHECK(model.w.tensor().is_same(storage));  // updated in place: optimizers keep their view
      CHECK(torch::equal(nnx::gather(model.w.value()).cpu(), new_value));
      ++pairs;
    }
  CHECK(pairs == 36);
}

TEST_CASE("update slices a whole value into blocks and gathers blocks into a whole variable",
          "[ranks4]") {
  auto mesh = nnx::make_mesh({2, 2}, {"a", "b"});
  const auto value = torch::arange(16, torch::kFloat).reshape({4, 4});
  Holder sharded(nnx::device_put(torch::zeros({4, 4}), {mesh, P("b", "a")}));
  nnx::update(sharded, state_of(nnx::Array(value)));
  CHECK(torch::equal(nnx::gather(sharded.w.value()).cpu(), value));
  CHECK(sharded.w.tensor().sizes().vec() == std::vector<int64_t>{2, 2});
  Holder whole{nnx::Array(torch::zeros({4, 4}))};
  nnx::update(whole, state_of(nnx::device_put(value, {mesh, P({"a", "b"})})));
  CHECK(whole.w.value().mesh() == nullptr);
  CHECK(torch::equal(whole.w.tensor(), value));
}

TEST_CASE("update refuses a value on another mesh, naming the path and both layouts", "[ranks4]") {
  auto square = nnx::make_mesh({2, 2}, {"a", "b"});
  auto flat = nnx::make_mesh({4, 1}, {"a", "b"});
  Holder model(nnx::device_put(torch::zeros({4, 4}), {square, P("a")}));
  CHECK_THROWS_WITH(
      nnx::update(model, state_of(nnx::device_put(torch::ones({4, 4}), {flat, P("a")}))),
      Contains("nothing was updated") &&
          Contains("w: the value is PartitionSpec('a', None) on Mesh('a': 4, 'b': 1) but the "
                   "variable is PartitionSpec('a', None) on Mesh('a': 2, 'b': 2)"));
  CHECK(torch::equal(nnx::gather(model.w.value()).cpu(), torch::zeros({4, 4})));
}
