// Error raising shared by NNX_CHECK and NNX_FAIL.
#include <nnx/core/error.h>

#include <string_view>

namespace nnx::detail {

void throw_error(const char* function, const std::string& message) {
  throw Error(fmt::format("[{}] {}", function, message));
}

std::string error_scope(const char* function, const char* signature) {
  const std::string_view name(function);
  if (name != "operator()") return std::string(name);
  // "R ns::outer(args)::<lambda(args)>" -> "outer"; "R ns::Functor::operator()(args)" -> "Functor"
  std::string_view sig(signature);
  size_t end = sig.find("::<lambda");
  if (end == std::string_view::npos) end = sig.find("::operator()");
  if (end == std::string_view::npos) return std::string(name);
  sig = sig.substr(0, end);
  if (!sig.empty() && sig.back() == ')') {  // drop the enclosing function's parameter list
    int depth = 0;
    size_t i = sig.size();
    while (i-- > 0) {
      if (sig[i] == ')') ++depth;
      else if (sig[i] == '(' && --depth == 0) break;
    }
    sig = sig.substr(0, i == std::string_view::npos ? 0 : i);
  }
  const size_t start = sig.find_last_of(": ");
  std::string_view scope = start == std::string_view::npos ? sig : sig.substr(start + 1);
  return scope.empty() ? std::string(name) : std::string(scope);
}

void throw_error_in(const char* function, const char* signature, const std::string& message) {
  throw Error(fmt::format("[{}] {}", error_scope(function, signature), message));
}

}  // namespace nnx::detail

namespace nnx {

std::string indented_list(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += "\n  " + item;
  return out;
}

}  // namespace nnx
