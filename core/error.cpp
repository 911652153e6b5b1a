// Error raising shared by NNX_CHECK and NNX_FAIL.
#include <nnx/core/error.h>

namespace nnx::detail {

void throw_error(const char* function, const std::string& message) {
  throw Error(fmt::format("[{}] {}", function, message));
}

}  // namespace nnx::detail
