// A spec that does not fit the MeshContext's mesh: the model still builds, computes nothing for
// that variable, and its first use (a forward pass, nnx::state, an optimizer) raises an error
// that names the variable's path, the shape, the spec and the fix.
#include "../catch_after_torch.h"

#include <nnx/nnx.h>

#include <torch/types.h>

using Catch::Matchers::Contains;
using nnx::P;

namespace {

struct Block : nnx::Module {
  Block(int64_t width, nnx::Rngs& rngs, nnx::PartitionSpec kernel_spec)
      : fc(width, width, rngs, {.kernel_metadata = {.out_sharding = kernel_spec}}) {}
  nnx::Array operator()(const nnx::Array& x) { return fc(x); }
  nnx::Linear NNX_FIELD(fc);
};

struct Tower : nnx::Module {
  // The third layer's kernel names a mesh axis the mesh lacks.
  explicit Tower(nnx::Rngs& rngs)
      : stem(4, rngs, P()),
        layers{Block(4, rngs, P()), Block(4, rngs, P()), Block(4, rngs, P(nnx::none, "model"))} {}
  nnx::Array operator()(const nnx::Array& x) {
    nnx::Array h = stem(x);
    for (auto& layer : layers) h = nnx::relu(layer(h));
    return h;
  }
  Block NNX_FIELD(stem);
  std::vector<Block> NNX_FIELD(layers);
};

}  // namespace

TEST_CASE("a spec that does not fit the MeshContext raises at first use, naming the path") {
  auto mesh = nnx::make_mesh({1}, {"data"});
  nnx::MeshContext on(mesh);
  nnx::Rngs rngs(0);
  Tower model(rngs);
  auto names_the_problem = [](auto&& use) {
    CHECK_THROWS_WITH(use(), Contains("'layers.2.fc.kernel'") && Contains("(4, 4)") &&
                                 Contains("'model'") && Contains("(data)"));
  };
  auto x = nnx::device_put(torch::ones({2, 4}), {mesh, P()});
  names_the_problem([&] { model(x); });
  names_the_problem([&] { nnx::state(model); });
  names_the_problem([&] { nnx::optim::Optimizer(model, nnx::optim::adam(1e-3)); });
  // The variables that fit were placed.
  CHECK(model.stem.fc.kernel.value().mesh() == mesh);
  CHECK(model.layers[0].fc.kernel.value().mesh() == mesh);
  // Module lists still work: they never read values.
  CHECK(model.iter_modules().size() == 9);
}

TEST_CASE("a variable outside any module that does not fit raises when its value is read") {
  auto mesh = nnx::make_mesh({1}, {"data"});
  {
    nnx::MeshContext on(mesh);
    nnx::Param lone(torch::zeros({3, 2}), {.out_sharding = P("model")});
    CHECK_THROWS_WITH(lone.value(), Contains("a variable built under it") && Contains("(3, 2)") &&
                                        Contains("'model'"));
    // A value set later replaces the one that could not be placed.
    lone.set_value(nnx::device_put(torch::ones({3, 2}), {mesh, P()}));
    CHECK(lone.value().mesh() == mesh);
  }
  // Outside the context the same variable places nothing and raises nothing.
  nnx::Param plain(torch::zeros({3, 2}), {.out_sharding = P("model")});
  CHECK_FALSE(plain.value().mesh());
}
