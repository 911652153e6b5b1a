// Materializing lazily initialized arrays, and the abstract mode eval_shape turns on.
#include <nnx/framework/array.h>
#include <nnx/framework/error.h>
#include <nnx/framework/lazy_array.h>

namespace nnx {

namespace {
thread_local bool abstract_init = false;
}

namespace detail {
bool abstract_init_active() { return abstract_init; }
AbstractInitScope::AbstractInitScope(bool abstract) : previous_(abstract_init) {
  abstract_init = abstract;
}
AbstractInitScope::~AbstractInitScope() { abstract_init = previous_; }
}  // namespace detail

Array materialize(const LazyArray& init) {
  if (abstract_init) return Array::abstract(init.shape, init.dtype);
  NNX_CHECK(init.block, "LazyArray of shape {} has no block generator", to_string(init.shape));
  at::Tensor full = init.block(Box::whole(init.shape));
  NNX_CHECK(full.sizes().vec() == init.shape,
            "initializer returned shape {} for requested shape {}",
            to_string(full.sizes().vec()), to_string(init.shape));
  return Array(full.to(init.dtype));
}

}  // namespace nnx
