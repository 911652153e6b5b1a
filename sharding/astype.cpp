// astype: the local block converted; the sharding and any pending sums stay as they are.
#include <nnx/sharding/astype.h>

#include <ATen/ATen.h>

namespace nnx {

Array astype(const Array& x, at::ScalarType dtype) {
  if (!x.defined() || x.dtype() == dtype) return x;
  return x.with_local(x.local().to(dtype));
}

Array astype(const Array& x, std::optional<at::ScalarType> dtype) {
  return dtype ? astype(x, *dtype) : x;
}

}  // namespace nnx
