// Uses the installed headers: the umbrella header and a finer one.
#include <nnx/framework/rngs.h>
#include <nnx/nnx.h>

#include <torch/torch.h>

#include <iostream>

struct Tiny : nnx::Module {
  nnx::Param NNX_FIELD(w);
  explicit Tiny(nnx::Rngs& rngs) : w(nnx::initializers::lecun_normal()(rngs.params(), {3, 2})) {}
};

int main() {
  nnx::Rngs rngs(0);
  Tiny tiny(rngs);
  auto [graphdef, params] = nnx::split(tiny, nnx::OfType<nnx::Param>);
  Tiny back = nnx::merge(graphdef, params);
  std::cout << nnx::state(back).to_string();
  return torch::equal(back.w.tensor(), tiny.w.tensor()) && back.w.shape() == nnx::Shape{3, 2} ? 0 : 1;
}
