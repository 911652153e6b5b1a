// The origin that collectives compare instead of their call path.
#include <nnx/sharding/collective_origin.h>
#include <nnx/sharding/detail/call_stack.h>

namespace nnx {

namespace {
thread_local const char* current_origin = nullptr;
}

CollectiveOrigin::CollectiveOrigin(const char* origin) : previous_(current_origin) {
  current_origin = origin;
}

CollectiveOrigin::~CollectiveOrigin() { current_origin = previous_; }

namespace detail {
const char* current_collective_origin() { return current_origin; }
}  // namespace detail

}  // namespace nnx
