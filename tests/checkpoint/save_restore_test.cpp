// Saving and restoring states on one process: a model with its optimizer and RNG streams
// round-trips and training continues identically; abstract targets; dtype changes; per-rank
// state and its world-size check; bad targets are errors naming the variable.
#include "checkpoint_test_util.h"

#include <torch/utils.h>

using Catch::Matchers::Contains;
namespace ckpt = nnx::checkpoint;

namespace {

struct Trainer {
  nnx::Rngs rngs;
  nnx_test::CkptNet model;
  nnx::optim::Optimizer opt;
  explicit Trainer(int seed)
      : rngs(seed, {{"dropout", seed + 1}}), model(rngs), opt(model, nnx::optim::adamw(1e-2)) {}
  double step(int s) {
    torch::manual_seed(100 + s);
    nnx::Array x(torch::randn({4, 8})), y(torch::randn({4, 8}));
    auto [loss, grads] = nnx::value_and_grad(
        [&](nnx_test::CkptNet& m) { return nnx::mean_squared_error(m(x), y); }, model);
    opt.update(model, grads);
    return nnx::gather(loss).item<double>();
  }
  nnx::State everything() {
    return ckpt::combine({{"model", nnx::state(model)}, {"opt", opt.state()}});
  }
};

}  // namespace

TEST_CASE("a model and its optimizer round-trip, RNG counters and step included") {
  nnx_test::SharedDir dir;
  Trainer trained(0);
  trained.step(0);
  trained.step(1);
  ckpt::save(dir.sub("2"), trained.everything(), {.metadata = {{"note", "two steps"}}});

  Trainer fresh(5);  // other values everywhere, same structure
  auto restored = ckpt::restore(dir.sub("2"), fresh.everything());
  nnx::update(fresh.model, ckpt::part(restored, "model"));
  fresh.opt.load_state(ckpt::part(restored, "opt"));
  nnx_test::check_bitwise_equal(nnx_test::whole_values(trained.everything()),
                                nnx_test::whole_values(fresh.everything()));
  int rng_counts = 0;
  for (const auto& [path, v] : restored) rng_counts += v.is<nnx::RngCount>();
  CHECK(rng_counts >= 1);
  CHECK(restored["opt.step"].tensor().item<int64_t>() == 2);
  CHECK(ckpt::read_metadata(dir.sub("2"))["note"] == "two steps");
  // Dropout masks and Adam moments continue where they were: the next losses are identical.
  for (int s = 2; s < 4; ++s) CHECK(fresh.step(s) == trained.step(s));
}

TEST_CASE("an abstract target restores, float32 to bfloat16 and back") {
  nnx_test::SharedDir dir;
  Trainer trained(0);
  trained.step(0);
  const auto saved = nnx_test::whole_values(nnx::state(trained.model));
  ckpt::save(dir.sub("f32"), nnx::state(trained.model));

  nnx::Rngs rngs(3);
  auto abstract = nnx::state(nnx::eval_shape([&] { return nnx_test::CkptNet(rngs); }));
  for (const auto& [path, v] : abstract)
    if (v.is<nnx::Param>()) CHECK(v.value().is_abstract());
  auto as_f32 = ckpt::restore(dir.sub("f32"), abstract);
  nnx_test::check_bitwise_equal(saved, nnx_test::whole_values(as_f32));

  nnx::State bf16_target;
  for (const auto& [path, v] : abstract) {
    auto dtype = at::isFloatingType(v.dtype()) ? at::kBFloat16 : v.dtype();
    bf16_target.add(path, nnx::detail::variable_like(v, nnx::Array::abstract(v.shape(), dtype)));
  }
  auto as_bf16 = ckpt::restore(dir.sub("f32"), bf16_target);
  for (const auto& [path, v] : as_bf16) {
    INFO(path);
    if (!at::isFloatingType(saved.at(path).scalar_type())) continue;
    CHECK(v.dtype() == at::kBFloat16);
    CHECK(torch::equal(v.tensor(), saved.at(path).to(at::kBFloat16)));
  }
  ckpt::save(dir.sub("bf16"), as_bf16);
  auto back = ckpt::restore(dir.sub("bf16"), abstract);
  for (const auto& [path, v] : back) {
    INFO(path);
    CHECK(v.dtype() == saved.at(path).scalar_type());
    if (at::isFloatingType(v.dtype()))
      CHECK(torch::equal(v.tensor(), saved.at(path).to(at::kBFloat16).to(v.dtype())));
  }
}

TEST_CASE("restore targets that do not match are errors naming the variable") {
  nnx_test::SharedDir dir;
  nnx::State state;
  state.add("w", nnx::Param(torch::arange(12, torch::kFloat).reshape({3, 4})));
  state.add("steps", nnx::OptState(torch::tensor(int64_t{7})));
  ckpt::save(dir.sub("c"), state);

  auto target = [](const std::string& path, nnx::Shape shape, at::ScalarType dtype) {
    nnx::State t;
    t.add(path, nnx::Param(nnx::Array::abstract(shape, dtype)));
    return t;
  };
  CHECK_THROWS_WITH(ckpt::restore(dir.sub("c"), target("v", {3, 4}, at::kFloat)),
                    Contains("'v'") && Contains(dir.sub("c")));
  CHECK_THROWS_WITH(ckpt::restore(dir.sub("c"), target("w", {4, 3}, at::kFloat)),
                    Contains("'w'") && Contains("shape (3, 4)") && Contains("(4, 3)"));
  CHECK_THROWS_WITH(ckpt::restore(dir.sub("c"), target("w", {3, 4}, at::kLong)),
                    Contains("'w'") && Contains("only floating types convert"));
  CHECK_THROWS_WITH(ckpt::restore(dir.sub("c"), target("steps", {}, at::kFloat)),
                    Contains("'steps'") && Contains("int64"));
  // Saving over a checkpoint, saving abstract values, restoring from nowhere.
  CHECK_THROWS_WITH(ckpt::save(dir.sub("c"), state), Contains("already holds a checkpoint"));
  CHECK_THROWS_WITH(ckpt::save(dir.sub("d"), target("w", {3, 4}, at::kFloat)),
                    Contains("'w'") && Contains("abstract"));
  CHECK_THROWS_WITH(ckpt::restore(dir.sub("none"), state), Contains(dir.sub("none")));
}

TEST_CASE("per-rank state restores on the same world size and refuses another") {
  nnx_test::SharedDir dir;
  nnx::State state;
  state.add("w", nnx::Param(torch::ones({2})));
  ckpt::save(dir.sub("p"), state, {.per_rank = {{"loader_position", 1234}}});
  CHECK(ckpt::restore_per_rank(dir.sub("p"))["loader_position"] == 1234);

  // The same checkpoint as if two ranks had saved it.
  auto manifest = nlohmann::json::parse(nnx_test::read_bytes(dir.sub("p/manifest.json")));
  manifest["world_size"] = 2;
  manifest["per_rank"] = {{{"loader_position", 1}}, {{"loader_position", 2}}};
  nnx_test::write_bytes(dir.sub("p/manifest.json"), manifest.dump());
  CHECK_THROWS_WITH(ckpt::restore_per_rank(dir.sub("p")),
                    Contains("saved by 2 ranks but this run has 1"));
  CHECK(torch::equal(ckpt::restore(dir.sub("p"), state)["w"].tensor(), torch::ones({2})));
}
