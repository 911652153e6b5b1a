// split / merge / state / update / clone / pop and their errors, with Flax's filter rules.
#include "../catch_after_torch.h"

#include "test_modules.h"

using namespace nnx_test;
using Catch::Matchers::Contains;

TEST_CASE("split then merge round-trips values, kinds and metadata") {
  nnx::Rngs rngs(0);
  MLP model(3, 4, 2, rngs);
  auto [graphdef, params, rest] = nnx::split(model, nnx::OfType<nnx::Param>, nnx::Everything);
  CHECK(params.size() == 6);
  CHECK(rest.paths() == std::vector<std::string>{"stats.train.count"});
  MLP back = nnx::merge(graphdef, params, rest);
  auto x = torch::randn({5, 3});
  CHECK(torch::equal(back(x), model(x)));
  CHECK_FALSE(back.input.kernel.same_as(model.input.kernel));  // new variables
  CHECK(back.stats.at("train").count.is<nnx::BatchStat>());
  CHECK(back.layers.size() == 2);
}

TEST_CASE("the first matching filter takes a variable") {
  nnx::Rngs rngs(0);
  MLP model(3, 4, 1, rngs);
  auto [graphdef, kernels, params, rest] =
      nnx::split(model, nnx::PathContains("kernel"), nnx::OfType<nnx::Param>, nnx::Everything);
  CHECK(kernels.paths() == std::vector<std::string>{"input.kernel", "layers.0.kernel"});
  CHECK(params.paths() == std::vector<std::string>{"input.bias", "layers.0.bias"});
  CHECK(rest.size() == 1);
}

TEST_CASE("split filters must cover every variable") {
  nnx::Rngs rngs(0);
  MLP model(3, 4, 1, rngs);
  CHECK_THROWS_WITH(nnx::split(model, nnx::OfType<nnx::Param>),
                    Contains("stats.train.count (BatchStat)") && Contains("nnx::Everything"));
}

TEST_CASE("Everything may only be the last filter") {
  nnx::Rngs rngs(0);
  MLP model(3, 4, 1, rngs);
  CHECK_THROWS_WITH(nnx::split(model, nnx::Everything, nnx::OfType<nnx::Param>),
                    Contains("[split]") && Contains("last filter"));
  CHECK_THROWS_WITH(nnx::state(model, nnx::Everything, nnx::Nothing), Contains("[state]"));
}

TEST_CASE("filters combine with Any, All, Not and predicates") {
  nnx::Rngs rngs(0);
  MLP model(3, 4, 1, rngs);
  auto input_kernel = nnx::state(model, nnx::All(nnx::PathContains("kernel"), nnx::PathContains("input")));
  CHECK(input_kernel.paths() == std::vector<std::string>{"input.kernel"});
  auto not_params = nnx::state(model, nnx::Not(nnx::OfType<nnx::Param>));
  CHECK(not_params.paths() == std::vector<std::string>{"stats.train.count"});
  auto any = nnx::state(model, nnx::Any(nnx::OfType<nnx::BatchStat>, nnx::PathContains("bias")));
  CHECK(any.size() == 3);
  auto wide = nnx::state(model, [](const std::string&, const nnx::Variable& v) {
    return v.shape().size() == 2;
  });
  CHECK(wide.size() == 2);
  CHECK(nnx::state(model, nnx::Nothing).empty());
  CHECK(nnx::state(model, nnx::PathContains("kern")).empty());  // whole path elements only
}

TEST_CASE("state with several filters returns one State each") {
  nnx::Rngs rngs(0);
  MLP model(3, 4, 1, rngs);
  auto [params, stats] = nnx::state(model, nnx::OfType<nnx::Param>, nnx::OfType<nnx::BatchStat>);
  CHECK(params.size() == 4);
  CHECK(stats.size() == 1);
  CHECK(params["input.kernel"].same_as(model.input.kernel));  // State shares the variables
}

TEST_CASE("a tied variable appears once and stays shared after merge and clone") {
  nnx::Rngs rngs(0);
  Tied model(rngs);
  auto state = nnx::state(model);
  CHECK(state.paths() == std::vector<std::string>{"embedding", "body.kernel", "body.bias"});
  auto [graphdef, params] = nnx::split(model);
  Tied back = nnx::merge(graphdef, params);
  CHECK(back.embedding.same_as(back.unembedding));
  CHECK_FALSE(back.embedding.same_as(model.embedding));
  Tied copy = nnx::clone(model);
  CHECK(copy.embedding.same_as(copy.unembedding));
  copy.embedding.tensor().mul_(2);
  CHECK(torch::equal(copy.unembedding.tensor(), copy.embedding.tensor()));
  CHECK_FALSE(torch::equal(copy.embedding.tensor(), model.embedding.tensor()));
  auto json = graphdef.to_json();
  bool found = false;
  for (const auto& v : json["variables"])
    if (v["path"] == "unembedding") found = v["shared_with"] == "embedding";
  CHECK(found);
}

TEST_CASE("merge names every path that does not fit") {
  nnx::Rngs rngs(0);
  MLP model(3, 4, 1, rngs);
  auto [graphdef, params, rest] = nnx::split(model, nnx::OfType<nnx::Param>, nnx::Everything);
  nnx::State bad;
  for (const auto& [path, v] : params) {
    if (path == "input.bias") continue;  // missing
    if (path == "input.kernel") bad.add(path, nnx::Param(torch::zeros({4, 3})));  // shape
    else if (path == "layers.0.bias") bad.add(path, nnx::Param(torch::zeros({4}, torch::kDouble)));
    else if (path == "layers.0.kernel") bad.add(path, nnx::BatchStat(torch::zeros({4, 4})));
    else bad.add(path, v);
  }
  bad.add("layers.7.kernel", nnx::Param(torch::zeros({1})));  // unknown
  try {
    (void)nnx::merge(graphdef, bad, rest);
    FAIL("merge accepted a State that does not fit");
  } catch (const nnx::Error& e) {
    std::string msg = e.what();
    CHECK_THAT(msg, Contains("[merge]"));
    CHECK_THAT(msg, Contains("input.bias: missing (Param float32(4,) expected)"));
    CHECK_THAT(msg, Contains("input.kernel: float32(4, 3) where the GraphDef has float32(3, 4)"));
    CHECK_THAT(msg, Contains("layers.0.bias: float64(4,)"));
    CHECK_THAT(msg, Contains("layers.0.kernel: kind BatchStat where the GraphDef has Param"));
    CHECK_THAT(msg, Contains("layers.7.kernel: not a variable of nnx_test::MLP"));
    CHECK_THAT(msg, Contains("5 problem(s)"));
  }
}

TEST_CASE("update sets values by path and changes nothing on a bad input") {
  nnx::Rngs rngs(0);
  MLP model(3, 4, 1, rngs);
  MLP other = nnx::clone(model);
  other.input.kernel.tensor().fill_(7);
  nnx::update(model, nnx::state(other, nnx::PathContains("input")));
  CHECK(torch::equal(model.input.kernel.tensor(), torch::full({3, 4}, 7.0)));
  CHECK_FALSE(model.input.kernel.same_as(other.input.kernel));

  nnx::State bad;
  bad.add("layers.0.bias", nnx::Param(torch::ones({4})));
  bad.add("input.kernel", nnx::Param(torch::ones({2, 2})));
  bad.add("nope", nnx::Param(torch::ones({1})));
  auto before = model.layers[0].bias.tensor().clone();
  CHECK_THROWS_WITH(nnx::update(model, bad),
                    Contains("input.kernel: float32(2, 2) given for a variable of float32(3, 4)") &&
                        Contains("nope: not a variable") && Contains("[update] nothing was updated"));
  CHECK(torch::equal(model.layers[0].bias.tensor(), before));
}

TEST_CASE("update reads every value before it writes: the model's own variables swap") {
  nnx::Rngs rngs(0);
  MLP model(3, 4, 2, rngs);
  const auto k0 = model.layers[0].kernel.tensor().clone();
  const auto k1 = model.layers[1].kernel.tensor().clone();
  auto own = nnx::state(model);
  nnx::State swapped;  // the model's own variables under each other's paths
  swapped.add("layers.0.kernel", own["layers.1.kernel"]);
  swapped.add("layers.1.kernel", own["layers.0.kernel"]);
  nnx::update(model, swapped);
  CHECK(torch::equal(model.layers[0].kernel.tensor(), k1));
  CHECK(torch::equal(model.layers[1].kernel.tensor(), k0));  // was k1 again: written first
  // A shift along the stack: layer 1 takes layer 0's kernel, layer 0 takes zeros.
  own = nnx::state(model);
  nnx::State shifted;
  shifted.add("layers.1.kernel", own["layers.0.kernel"]);
  shifted.add("layers.0.kernel", nnx::Param(torch::zeros({4, 4})));
  nnx::update(model, shifted);
  CHECK(torch::equal(model.layers[1].kernel.tensor(), k1));
  CHECK(torch::equal(model.layers[0].kernel.tensor(), torch::zeros({4, 4})));
}

TEST_CASE("merge takes a tied variable under any one of its paths, and names a second") {
  nnx::Rngs rngs(0);
  Tied model(rngs);
  auto [graphdef, params] = nnx::split(model);
  nnx::State by_alias;  // as a State from a model that names the table by its second path
  by_alias.add("unembedding", params["embedding"]);
  by_alias.add("body.kernel", params["body.kernel"]);
  by_alias.add("body.bias", params["body.bias"]);
  Tied back = nnx::merge(graphdef, by_alias);
  CHECK(back.embedding.same_as(back.unembedding));
  CHECK(torch::equal(back.embedding.tensor(), model.embedding.tensor()));
  // Both paths given: one variable given twice. Neither given: missing, naming its other path.
  by_alias.add("embedding", params["embedding"]);
  CHECK_THROWS_WITH(nnx::merge(graphdef, by_alias),
                    Contains("unembedding: the same variable as embedding (shared), given under "
                             "both paths") && !Contains("unknown path"));
  nnx::State none;
  none.add("body.kernel", params["body.kernel"]);
  none.add("body.bias", params["body.bias"]);
  CHECK_THROWS_WITH(nnx::merge(graphdef, none),
                    Contains("embedding: missing (Param float32(5, 4) expected; shared with "
                             "unembedding)"));
}

TEST_CASE("update through a second path of a tied variable reaches the shared variable") {
  nnx::Rngs rngs(0);
  Tied model(rngs);
  nnx::State s;
  s.add("unembedding", nnx::Param(torch::zeros({5, 4})));
  nnx::update(model, s);
  CHECK(torch::equal(model.embedding.tensor(), torch::zeros({5, 4})));
}

TEST_CASE("pop removes the selected variables and returns them") {
  nnx::Rngs rngs(0);
  MLP model(3, 4, 1, rngs);
  model(torch::ones({2, 3}));
  CHECK(nnx::state(model, nnx::OfType<nnx::Intermediate>).size() == 1);
  auto popped = nnx::pop(model, nnx::OfType<nnx::Intermediate>);
  CHECK(popped.paths() == std::vector<std::string>{"activations"});
  CHECK(popped["activations"].shape() == nnx::Shape{2, 4});
  CHECK_FALSE(model.activations.defined());
  CHECK(nnx::state(model, nnx::OfType<nnx::Intermediate>).empty());
}

TEST_CASE("eval_shape builds a module with shapes and metadata but no storage") {
  auto abstract = nnx::eval_shape([] {
    nnx::Rngs rngs(0);
    return Dense(1024, 4096, rngs,
                 nnx::with_partitioning(nnx::initializers::lecun_normal(), nnx::P(nnx::none, "model")));
  });
  CHECK(abstract.kernel.value().is_abstract());
  CHECK(abstract.kernel.shape() == nnx::Shape{1024, 4096});
  CHECK(abstract.kernel.dtype() == torch::kFloat);
  CHECK(abstract.kernel.metadata().out_sharding == nnx::P(nnx::none, "model"));
  CHECK(abstract.kernel.tensor().is_meta());
  // A concrete State merges into the abstract module's GraphDef.
  nnx::Rngs rngs(0);
  Dense concrete(1024, 4096, rngs);
  auto [graphdef, abstract_state] = nnx::split(abstract);
  Dense merged = nnx::merge(graphdef, nnx::state(concrete));
  CHECK(torch::equal(merged.kernel.tensor(), concrete.kernel.tensor()));
  CHECK_FALSE(nnx::detail::abstract_init_active());
}

TEST_CASE("the state lists path, kind, dtype, shape and metadata") {
  nnx::Rngs rngs(0);
  Dense layer(3, 4, rngs, nnx::initializers::lecun_normal(),
              {.out_sharding = nnx::P("embed", "mlp"),
               .sharding_rules = nnx::ShardingRules{{"embed", nnx::none}, {"mlp", "model"}}});
  auto text = nnx::state(layer).to_string();
  CHECK_THAT(text, Contains("kernel  Param  float32[3,4]  out_sharding=PartitionSpec('embed', 'mlp') "
                            "sharding_rules=(('embed', None), ('mlp', 'model'))"));
  CHECK_THAT(text, Contains("bias    Param  float32[4]"));
  auto [graphdef, state] = nnx::split(layer);
  auto json = nnx::to_json(graphdef, state, true);
  CHECK(json["graphdef"]["type"] == "nnx_test::Dense");
  CHECK(json["state"][0]["path"] == "kernel");
  CHECK(json["state"][0]["metadata"]["out_sharding"] == nlohmann::json::array({"embed", "mlp"}));
  CHECK(json["state"][1]["value"] == nlohmann::json::array({0.0, 0.0, 0.0, 0.0}));
  CHECK(json["state"][0]["value"][2][3].get<double>() == Approx(layer.kernel.tensor()[2][3].item<double>()));
}
