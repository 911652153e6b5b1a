// Shared by the checkpoint parsers: JSON parsing with a nesting limit, typed access to fields
// with errors naming the file and the entry, and close-name suggestions for failed lookups.
#pragma once

#include <nnx/core/error.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace nnx::checkpoint::detail {

using Json = nlohmann::json;
constexpr int kMaxJsonDepth = 64;

// Where a value sits, for errors: "[who] <entry> in '<file>': <message>".
struct Where {
  const char* who;        // the public function, named in brackets
  std::string_view file;  // the file being parsed
  std::string entry;      // e.g. "variable 'w', chunk 2"; empty for the file as a whole

  std::string describe() const;           // "variable 'w' in 'f'", or "'f'"
  Where at(std::string sub_entry) const;  // same file and function, another entry
  [[noreturn]] void fail(const std::string& message) const;
  template <typename... Args>
  void check(bool cond, fmt::format_string<Args...> format, Args&&... args) const {
    if (!cond) fail(fmt::format(format, std::forward<Args>(args)...));
  }
};

// Parses text; syntax errors and nesting deeper than kMaxJsonDepth fail at `where`.
Json parse_json(std::string_view text, const Where& where);

// A short rendering of a value for messages: scalars dumped (long strings cut), containers
// as "an array of N entries" / "an object of N keys".
std::string excerpt(const Json& value);

// A shape as Python prints a tuple: "(2, 3)", "(4,)", "()".
std::string shape_text(const std::vector<int64_t>& shape);
std::string shorten(std::string_view text);  // cut to 80 bytes, made printable
// Bytes outside printable ASCII as \xNN, so damaged input never reaches a terminal raw.
std::string printable(std::string_view text);

// obj must be an object whose keys are all in `allowed`.
void check_keys(const Json& obj, std::initializer_list<std::string_view> allowed,
                const Where& where);
// The value of a required key of an object.
const Json& field(const Json& obj, std::string_view key, const Where& where);

std::string get_string(const Json& value, std::string_view what, const Where& where);
int64_t get_int(const Json& value, std::string_view what, int64_t lo, int64_t hi,
                const Where& where);
uint64_t get_uint(const Json& value, std::string_view what, const Where& where);
// An array of at most max_size integers (any int64 value; callers check ranges).
std::vector<int64_t> get_int_list(const Json& value, std::string_view what, size_t max_size,
                                  const Where& where);

// Up to `limit` candidates within a small edit distance of name, closest first.
std::vector<std::string> close_names(const std::vector<std::string_view>& candidates,
                                     std::string_view name, size_t limit = 5);

}  // namespace nnx::checkpoint::detail
