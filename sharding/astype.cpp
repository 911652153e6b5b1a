// astype: the local block converted; the sharding stays, and pending sums too where the cast
// is to a floating type (a cast to integers or bool is not linear: the sum is taken first).
#include <nnx/sharding/astype.h>

#include <nnx/sharding/detail/ops_common.h>

#include <ATen/ATen.h>

namespace nnx {

Array astype(const Array& x, at::ScalarType dtype) {
  if (!x.defined() || x.dtype() == dtype) return x;
  const bool linear = at::isFloatingType(dtype) || at::isComplexType(dtype);
  const Array& source = linear || x.partial_axes().empty() ? x : detail::resolved(x);
  return source.with_local(source.local().to(dtype));
}

Array astype(const Array& x, std::optional<at::ScalarType> dtype) {
  return dtype ? astype(x, *dtype) : x;
}

}  // namespace nnx
