// Optimizer::state and load_state: the optimizer's variables under dotted paths (shared
// handles, for checkpoints), and resuming from them exactly.
#include "../catch_after_torch.h"

#include "optim_test_models.h"

#include <torch/utils.h>

using Catch::Matchers::Contains;
namespace optim = nnx::optim;

namespace {

optim::GradientTransformation clipped_adamw() {
  return optim::chain({optim::clip_by_global_norm(0.5),
                       optim::adamw(optim::warmup_cosine_decay_schedule(0.0, 1e-2, 2, 10))});
}

void train(nnx_test::Net& model, optim::Optimizer& opt, int steps, int first) {
  for (int s = first; s < first + steps; ++s) {
    torch::manual_seed(100 + s);  // the same batches for every model
    auto x = torch::randn({6, 8}, torch::kDouble), y = torch::randn({6, 4}, torch::kDouble);
    auto [loss, grads] = nnx::value_and_grad(
        [&](nnx_test::Net& m) { return nnx::mean_squared_error(m(nnx::Array(x)), nnx::Array(y)); },
        model);
    opt.update(model, std::move(grads));
  }
}

}  // namespace

TEST_CASE("optimizer state lists step, counts and moments under dotted paths") {
  auto model = nnx_test::make_net(nullptr);
  optim::Optimizer opt(model, clipped_adamw());
  nnx::State state = opt.state();
  // chain(clip, chain(adam, decay, schedule)): adam's count, mu, nu, then the schedule's count.
  std::vector<std::string> expected{"step", "opt_state.1.0.count"};
  for (const char* slot : {"mu", "nu"})
    for (const auto& p : nnx_test::net_paths())
      expected.push_back(fmt::format("opt_state.1.0.{}.{}", slot, p));
  expected.push_back("opt_state.1.2.count");
  CHECK(state.paths() == expected);
  for (const auto& [path, v] : state) {
    INFO(path);
    CHECK(v.is<nnx::OptState>());
  }
  CHECK(state["step"].dtype() == torch::kLong);
  CHECK(state["step"].shape().empty());
  // Handles, not copies: the optimizer's own variables.
  CHECK(state["opt_state.1.0.mu.layers.1.kernel"].same_as(
      opt.opt_state().inner[1].inner[0].slots[0]["layers.1.kernel"]));
  train(model, opt, 3, 0);
  CHECK(state["step"].tensor().item<int64_t>() == 3);
  CHECK(state["opt_state.1.0.count"].tensor().item<int64_t>() == 3);
  CHECK(state["opt_state.1.2.count"].tensor().item<int64_t>() == 3);
  CHECK(opt.step() == 3);
  CHECK(torch::equal(state["opt_state.1.0.nu.layers.0.bias"].tensor(),
                     opt.opt_state().inner[1].inner[0].slots[1]["layers.0.bias"].tensor()));

  // Other transformations name their slots as optax does; a chain itself has no count.
  optim::Optimizer momentum(model, optim::sgd(0.1, 0.9)), rms(model, optim::rmsprop(0.1));
  CHECK(momentum.state().paths() ==
        std::vector<std::string>{"step", "opt_state.0.trace.layers.0.kernel",
                                 "opt_state.0.trace.layers.0.bias",
                                 "opt_state.0.trace.layers.1.kernel",
                                 "opt_state.0.trace.layers.1.bias"});
  CHECK(rms.state().contains("opt_state.0.nu.layers.1.bias"));
}

TEST_CASE("load_state into a fresh optimizer resumes training bitwise") {
  auto model = nnx_test::make_net(nullptr);
  optim::Optimizer opt(model, clipped_adamw());
  train(model, opt, 2, 0);

  nnx_test::Net resumed = nnx::clone(model), unloaded = nnx::clone(model);
  optim::Optimizer fresh(resumed, clipped_adamw()), ignorant(unloaded, clipped_adamw());
  fresh.load_state(opt.state());
  CHECK(fresh.step() == 2);
  // Copies, not shared tensors: the source keeps its own.
  CHECK_FALSE(fresh.state()["opt_state.1.0.mu.layers.0.kernel"].tensor().is_same(
      opt.state()["opt_state.1.0.mu.layers.0.kernel"].tensor()));

  train(model, opt, 2, 2);
  train(resumed, fresh, 2, 2);
  train(unloaded, ignorant, 2, 2);
  CHECK(fresh.step() == 4);
  auto params = nnx::state(model), resumed_params = nnx::state(resumed);
  for (const auto& path : nnx_test::net_paths()) {
    INFO(path);
    CHECK(torch::equal(params[path].tensor(), resumed_params[path].tensor()));
  }
  for (const auto& [path, v] : opt.state()) {
    INFO(path);
    CHECK(torch::equal(v.tensor(), fresh.state()[path].tensor()));
  }
  // Without the loaded state the trajectory differs (the test is not vacuous).
  CHECK_FALSE(torch::equal(params["layers.0.kernel"].tensor(),
                           nnx::state(unloaded)["layers.0.kernel"].tensor()));
}

TEST_CASE("load_state lists every bad path and changes nothing") {
  auto model = nnx_test::make_net(nullptr);
  optim::Optimizer trained(model, optim::adam(1e-2));
  train(model, trained, 1, 0);
  optim::Optimizer target(model, optim::adam(1e-2));

  nnx::State bad;
  for (const auto& [path, v] : trained.state()) {
    if (path == "step") continue;  // missing
    if (path == "opt_state.0.mu.layers.0.kernel")
      bad.add(path, nnx::OptState(torch::zeros({16, 8}, torch::kDouble)));  // transposed
    else if (path == "opt_state.0.nu.layers.1.bias")
      bad.add(path, nnx::OptState(torch::zeros({4}, torch::kFloat)));  // wrong dtype
    else
      bad.add(path, v);
  }
  bad.add("opt_state.0.mu.layers.2.kernel", nnx::OptState(torch::zeros({2})));  // unknown
  try {
    target.load_state(bad);
    FAIL("load_state accepted a bad State");
  } catch (const nnx::Error& e) {
    std::string what = e.what();
    CHECK_THAT(what, Contains("nothing was loaded: 4 problem(s)"));
    CHECK_THAT(what, Contains("'step': missing from the source"));
    CHECK_THAT(what, Contains("'opt_state.0.mu.layers.0.kernel': float64(16, 8) given for "
                              "float64(8, 16)"));
    CHECK_THAT(what, Contains("'opt_state.0.nu.layers.1.bias': float32(4,) given for float64(4,)"));
    CHECK_THAT(what,
               Contains("'opt_state.0.mu.layers.2.kernel': not a variable of this optimizer"));
  }
  CHECK(target.step() == 0);
  for (const auto& [path, v] : target.state()) {
    INFO(path);
    CHECK(torch::count_nonzero(v.tensor()).item<int64_t>() == 0);
  }
}

TEST_CASE("update with a model the optimizer was not built for is refused, changing nothing") {
  auto model = nnx_test::make_net(nullptr);
  auto other = nnx_test::make_net(nullptr);  // same paths, shapes and values: another model
  nnx::optim::Optimizer opt(model, nnx::optim::adam(1e-2));
  auto x = nnx::Array(torch::ones({2, 8}, torch::kDouble));  // the test nets are float64
  auto [loss, grads] = nnx::value_and_grad(
      [&](nnx_test::Net& m) { return nnx::mean(nnx::square(m(x))); }, other);
  const auto before = other.layers[0].kernel.tensor().clone();
  CHECK_THROWS_WITH(opt.update(other, grads),
                    Catch::Matchers::Contains("nothing was updated") &&
                        Catch::Matchers::Contains("'layers.0.kernel' is not the variable the "
                                                  "optimizer was built for"));
  CHECK(torch::equal(other.layers[0].kernel.tensor(), before));
  CHECK(opt.step() == 0);
  opt.update(model, grads);  // the right model takes the same gradients
  CHECK(opt.step() == 1);
}

namespace {
// A transformation that fails on the parameter at `bad` of each update: by throwing, or by
// returning an update of the wrong shape.
optim::GradientTransformation failing_at(size_t bad, bool throws) {
  optim::GradientTransformation tx;
  tx.init = [](const nnx::State&) { return optim::TxState{}; };
  tx.update = [bad, throws](nnx::State& updates, optim::TxState&, const nnx::State&) {
    size_t i = 0;
    for (auto& [path, u] : updates) {
      if (i++ != bad) continue;
      if (throws) NNX_FAIL("this transformation fails on '{}'", path);
      u.set_value(nnx::Array(torch::zeros({1}, torch::kDouble)));
    }
  };
  return tx;
}

std::vector<at::Tensor> snapshot(const nnx::State& s) {
  std::vector<at::Tensor> out;
  for (const auto& [path, v] : s) out.push_back(v.tensor().clone());
  return out;
}

bool unchanged(const nnx::State& s, const std::vector<at::Tensor>& before) {
  size_t i = 0;
  for (const auto& [path, v] : s)
    if (!torch::equal(v.tensor(), before[i++])) return false;
  return true;
}
}  // namespace

TEST_CASE("an update that fails midway changes no parameter and no optimizer state") {
  for (bool throws : {true, false}) {
    INFO((throws ? "a transformation throws" : "an update of the wrong shape"));
    auto model = nnx_test::make_net(nullptr);
    // Adam steps its moments first; the failing part then stops the chain on the 3rd parameter.
    optim::Optimizer opt(model, optim::chain({optim::scale_by_adam(), optim::scale(-1e-2),
                                              failing_at(2, throws)}));
    auto x = nnx::Array(torch::ones({2, 8}, torch::kDouble));
    auto [loss, grads] = nnx::value_and_grad(
        [&](nnx_test::Net& m) { return nnx::mean(nnx::square(m(x))); }, model);
    const auto params = snapshot(nnx::state(model));
    const auto state = snapshot(opt.state());
    CHECK_THROWS_WITH(opt.update(model, grads),
                      Contains(throws ? "this transformation fails on" : "nothing was updated"));
    CHECK(unchanged(nnx::state(model), params));
    CHECK(unchanged(opt.state(), state));
    CHECK(opt.step() == 0);
  }
}
