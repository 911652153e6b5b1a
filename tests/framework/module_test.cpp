// Modules: field registration, paths, containers, handles, training flags, submodules.
#include "../catch_after_torch.h"

#include "test_modules.h"

using namespace nnx_test;
using Catch::Matchers::Contains;

TEST_CASE("fields are visited in declaration order with dotted container paths") {
  nnx::Rngs rngs(0);
  MLP model(3, 4, 2, rngs);
  std::vector<std::string> expected{"input.kernel",    "input.bias",      "layers.0.kernel",
                                    "layers.0.bias",   "layers.1.kernel", "layers.1.bias",
                                    "stats.train.count"};
  CHECK(nnx::state(model).paths() == expected);  // activations is still empty
}

TEST_CASE("copying a variable handle shares the variable") {
  nnx::Param a(torch::zeros({2}));
  nnx::Param b = a;
  b.set_value(nnx::Array(torch::ones({2})));
  CHECK(a.same_as(b));
  CHECK(torch::equal(a.tensor(), torch::ones({2})));
  nnx::Variable base = a;  // a handle of the base type still knows the kind
  CHECK(base.is<nnx::Param>());
  CHECK(base.type().name == "Param");
}

TEST_CASE("copying a module shares its variables, clone does not") {
  nnx::Rngs rngs(0);
  Dense layer(2, 3, rngs);
  Dense copy = layer;
  CHECK(copy.kernel.same_as(layer.kernel));
  Dense deep = nnx::clone(layer);
  CHECK_FALSE(deep.kernel.same_as(layer.kernel));
  CHECK(torch::equal(deep.kernel.tensor(), layer.kernel.tensor()));
  deep.kernel.tensor().add_(1.0);
  CHECK_FALSE(torch::equal(deep.kernel.tensor(), layer.kernel.tensor()));
  CHECK(deep.features == 3);
}

TEST_CASE("modules in vectors keep working after the vector reallocates") {
  nnx::Rngs rngs(0);
  std::vector<Dense> layers;
  for (int i = 0; i < 9; ++i) layers.emplace_back(2, 2, rngs);  // several reallocations
  for (auto& layer : layers) CHECK(nnx::state(layer).paths() == std::vector<std::string>{"kernel", "bias"});
}

TEST_CASE("train and eval set the flag on every submodule") {
  nnx::Rngs rngs(0);
  MLP model(3, 4, 2, rngs);
  CHECK(model.layers[1].is_training());
  model.eval();
  for (auto& [path, m] : model.iter_modules()) CHECK_FALSE(m->is_training());
  model.train();
  CHECK(model.layers[0].is_training());
}

TEST_CASE("children and iter_modules list submodules with paths and types") {
  nnx::Rngs rngs(0);
  MLP model(3, 4, 2, rngs);
  std::vector<std::string> paths, types;
  for (auto& [path, m] : model.children()) {
    paths.push_back(path);
    types.push_back(m->type_name());
  }
  CHECK(paths == std::vector<std::string>{"input", "layers.0", "layers.1", "stats.train"});
  CHECK(types == std::vector<std::string>{"nnx_test::Dense", "nnx_test::Dense", "nnx_test::Dense",
                                          "nnx_test::Counter"});
  CHECK(model.iter_modules().size() == 5);
  CHECK(model.iter_modules()[0].first.empty());
}

struct LoRAParam : nnx::VariableKind<LoRAParam, nnx::Param> {
  using VariableKind::VariableKind;
};

TEST_CASE("user variable kinds refine built-in kinds") {
  LoRAParam lora(torch::zeros({2, 2}));
  CHECK(lora.is<LoRAParam>());
  CHECK(lora.is<nnx::Param>());
  CHECK_FALSE(lora.is<nnx::BatchStat>());
  nnx::Param plain(torch::zeros({1}));
  CHECK_FALSE(plain.is<LoRAParam>());
  CHECK(lora.type().name == "LoRAParam");
  CHECK(nnx::variable_type<nnx::RngKey>().is_a(nnx::variable_type<nnx::RngState>()));
}

TEST_CASE("an empty variable handle reports how to fix it") {
  nnx::Param empty;
  CHECK_FALSE(empty.defined());
  CHECK_THROWS_WITH(empty.value(), Contains("this variable holds nothing: a field declared with "
                                             "NNX_FIELD but never initialized") &&
                                        Contains("assign one (e.g. nnx::Param(init(...)))"));
}

TEST_CASE("map keys with dots are rejected with the path") {
  struct Bad : nnx::Module {
    std::map<std::string, Counter> NNX_FIELD(stats);
    Bad() { stats.emplace("a.b", Counter()); }
  } bad;
  CHECK_THROWS_WITH(nnx::state(bad), Contains("'a.b'") && Contains("stats"));
}
