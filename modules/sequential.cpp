// Sequential composition.
#include <nnx/modules/sequential.h>

namespace nnx {

Array Sequential::operator()(const Array& x) const {
  Array y = x;
  for (size_t i = 0; i < steps_.size(); ++i) y = steps_[i](layers[i].get(), y);
  return y;
}

}  // namespace nnx
