// Error raising shared by NNX_CHECK and NNX_FAIL.
#include <nnx/core/error.h>

namespace nnx::detail {

void throw_error(const char* function, const std::string& message) {
  throw Error(fmt::format("[{}] {}", function, message));
}

}  // namespace nnx::detail

namespace nnx {

std::string indented_list(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += "\n  " + item;
  return out;
}

}  // namespace nnx
