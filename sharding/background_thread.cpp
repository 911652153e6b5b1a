// A background thread's collectives wait lazily (sharding/detail/collective_wait.h).
#include <nnx/sharding/background_thread.h>

#include <nnx/sharding/detail/collective_wait.h>

namespace nnx {

void mark_background_thread() { detail::set_lazy_waits(true); }

}  // namespace nnx
