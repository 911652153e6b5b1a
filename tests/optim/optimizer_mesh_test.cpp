// Optimizer::update checks before it changes anything: the parameters and gradients must be on
// the mesh the optimizer was built for, and the gradients must cover exactly its parameters.
#include "../catch_after_torch.h"

#include "optim_test_models.h"

using Catch::Matchers::Contains;
namespace optim = nnx::optim;

namespace {

std::vector<nnx::Metadata> column_sharded() {
  return {{.out_sharding = nnx::P(nnx::none, "model")}, {.out_sharding = nnx::P("model")}};
}

nnx::State grads_of(nnx_test::Net& model) {
  auto x = torch::ones({8, 8}, torch::kDouble);
  const auto& mesh = model.layers[0].kernel.value().mesh();
  nnx::Array xs = mesh ? nnx::device_put(x, {mesh, nnx::P()}) : nnx::Array(x);
  auto [loss, grads] = nnx::value_and_grad(
      [&](nnx_test::Net& m) { return nnx::mean(nnx::square(m(xs))); }, model);
  return grads;
}

// Everything an update could have changed, gathered.
std::vector<at::Tensor> snapshot(nnx_test::Net& model, const optim::Optimizer& opt) {
  std::vector<at::Tensor> out;
  for (const auto& [path, v] : nnx::state(model).merged_with(opt.state()))
    out.push_back(nnx::gather(v.value()).clone());
  return out;
}

void check_unchanged(nnx_test::Net& model, const optim::Optimizer& opt,
                     const std::vector<at::Tensor>& before) {
  auto after = snapshot(model, opt);
  REQUIRE(after.size() == before.size());
  for (size_t i = 0; i < after.size(); ++i) CHECK(torch::equal(after[i], before[i]));
  CHECK(opt.step() == 0);
}

}  // namespace

TEST_CASE("an optimizer built on another mesh names the parameter and the fix", "[ranks8]") {
  auto built_on = nnx::make_mesh({2, 4}, {"data", "model"});
  auto other = nnx::make_mesh({4, 2}, {"data", "model"});
  auto model = nnx_test::make_net(built_on, column_sharded());
  auto moved = nnx_test::make_net(other, column_sharded());
  optim::Optimizer opt(model, optim::adam(1e-2));
  auto before = snapshot(model, opt);

  // The model passed to update lives on another mesh (with its own gradients).
  auto moved_before = snapshot(moved, opt);
  CHECK_THROWS_WITH(opt.update(moved, grads_of(moved)),
                    Contains("'layers.0.kernel' is on Mesh('data': 4, 'model': 2) but the "
                             "optimizer was built for Mesh('data': 2, 'model': 4); build the "
                             "optimizer after placing the model"));
  check_unchanged(moved, opt, moved_before);
  // The right model with gradients taken on the other mesh.
  CHECK_THROWS_WITH(opt.update(model, grads_of(moved)),
                    Contains("the gradient of 'layers.1.bias' is on Mesh('data': 4, 'model': 2)"));
  check_unchanged(model, opt, before);
  // The right pair still works.
  opt.update(model, grads_of(model));
  CHECK(opt.step() == 1);
}

TEST_CASE("a mesh with other axis names is another mesh", "[ranks2][ranks4][ranks8]") {
  const int64_t n = nnx::world_size();
  auto built_on = nnx::make_mesh({n}, {"data"});
  auto other = nnx::make_mesh({n}, {"model"});
  auto model = nnx_test::make_net(built_on);
  auto moved = nnx_test::make_net(other);
  optim::Optimizer opt(model, optim::sgd(0.1, 0.9));
  auto before = snapshot(moved, opt);
  CHECK_THROWS_WITH(opt.update(moved, grads_of(moved)),
                    Contains(fmt::format("is on Mesh('model': {}) but the optimizer was built for "
                                         "Mesh('data': {})", n, n)));
  check_unchanged(moved, opt, before);
}

TEST_CASE("an optimizer built before placing the model says to build it after") {
  auto model = nnx_test::make_net(nullptr);
  optim::Optimizer opt(model, optim::adam(1e-2));
  auto placed = nnx::clone(model);
  auto mesh = nnx::make_mesh({nnx::world_size()}, {"data"});
  for (auto& [path, v] : nnx::state(placed))
    v.set_value(nnx::device_put(v.tensor(), {mesh, nnx::P()}));
  auto before = snapshot(placed, opt);
  try {
    opt.update(placed, grads_of(placed));
    FAIL("update accepted a placed model");
  } catch (const nnx::Error& e) {
    std::string what = e.what();
    CHECK_THAT(what, Contains("nothing was updated: 8 problem(s)"));  // 4 parameters, 4 gradients
    CHECK_THAT(what, Contains("'layers.0.bias' is on Mesh('data': 1) but the optimizer was built "
                              "for no mesh; build the optimizer after placing the model"));
  }
  check_unchanged(placed, opt, before);
  // Unplaced gradients for an unplaced model are fine.
  opt.update(model, grads_of(model));
  CHECK(opt.step() == 1);
}

TEST_CASE("gradients with missing or extra paths are one error listing them") {
  auto model = nnx_test::make_net(nullptr);
  optim::Optimizer opt(model, optim::adam(1e-2));
  auto before = snapshot(model, opt);
  nnx::State grads = grads_of(model), wrong;
  for (const auto& [path, v] : grads)
    if (path != "layers.0.bias") wrong.add(path, v);
  wrong.add("layers.2.kernel", grads["layers.0.kernel"]);
  wrong.add("head.bias", grads["layers.0.bias"]);
  CHECK_THROWS_WITH(opt.update(model, wrong),
                    Contains("5 updates for 4 parameters (missing: 'layers.0.bias'; unexpected: "
                             "'layers.2.kernel', 'head.bias'); pass the gradients of exactly the "
                             "optimized parameters"));
  check_unchanged(model, opt, before);
  // A gradient of the wrong shape is caught before anything changes as well.
  nnx::State misshapen;
  for (const auto& [path, v] : grads)
    misshapen.add(path, path == "layers.1.kernel"
                            ? nnx::Param(torch::zeros({4, 16}, torch::kDouble))
                            : v);
  CHECK_THROWS_WITH(opt.update(model, misshapen),
                    Contains("the gradient of 'layers.1.kernel' has shape (4, 16), the parameter "
                             "(16, 4)"));
  check_unchanged(model, opt, before);
}
