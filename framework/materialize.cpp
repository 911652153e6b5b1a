// Materializing lazily initialized arrays (on the mesh context's mesh when one is active), and
// the abstract mode eval_shape turns on.
#include <nnx/sharding/array.h>
#include <nnx/core/error.h>
#include <nnx/framework/materialize.h>
#include <nnx/sharding/mesh_context.h>
#include <nnx/framework/sharded_init.h>

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
  if (abstract_init) return Array::abstract(std::make_shared<const LazyArray>(init));
  std::string what = fmt::format("a variable of shape {}", to_string(init.shape));
  if (!init.metadata.empty()) what += fmt::format(" with {}", init.metadata.to_string());
  return materialize_on(init, current_mesh(), what);
}

}  // namespace nnx
