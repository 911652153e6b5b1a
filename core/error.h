// nnx::Error and the one check macro: errors start with the function in brackets, name the
// offending values and, where known, the fix.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace nnx {

// Every error nnx raises on purpose is an nnx::Error (a std::runtime_error).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Each item on its own indented line ("\n  item"), for errors that list every problem.
std::string indented_list(const std::vector<std::string>& items);

namespace detail {
[[noreturn]] void throw_error(const char* function, const std::string& message);
// As throw_error; inside a lambda (function "operator()") the enclosing function's name is taken
// from `signature` (__PRETTY_FUNCTION__).
[[noreturn]] void throw_error_in(const char* function, const char* signature,
                                 const std::string& message);
// The name errors show for a function: `function`, or the enclosing one of a lambda.
std::string error_scope(const char* function, const char* signature);
}  // namespace detail

}  // namespace nnx

// NNX_CHECK(cond, "fmt", args...): throws nnx::Error("[function] message") when cond is false.
#define NNX_CHECK(cond, ...)                                                                 \
  do {                                                                                       \
    if (!(cond))                                                                             \
      ::nnx::detail::throw_error_in(__func__, __PRETTY_FUNCTION__, fmt::format(__VA_ARGS__)); \
  } while (0)

// NNX_FAIL("fmt", args...): throws unconditionally.
#define NNX_FAIL(...) \
  ::nnx::detail::throw_error_in(__func__, __PRETTY_FUNCTION__, fmt::format(__VA_ARGS__))
