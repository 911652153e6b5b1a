// Sequential composition.
#include <nnx/modules/sequential.h>

#include <nnx/core/error.h>

namespace nnx {

Array Sequential::operator()(const Array& x) const {
  Array y = x;
  for (size_t i = 0; i < steps_.size(); ++i) y = steps_[i](layers[i].get(), y);
  return y;
}

void Sequential::fail_get(size_t i, const std::string& wanted) const {
  NNX_CHECK(i < layers.size(), "Sequential::get<{}>({}): there are {} layers", wanted, i,
            layers.size());
  NNX_CHECK(layers[i] != nullptr, "Sequential::get<{}>({}): layer {} is a function, not a module",
            wanted, i, i);
  NNX_FAIL("Sequential::get<{}>({}): layer {} is a {}", wanted, i, i, layers[i]->type_name());
}

}  // namespace nnx
