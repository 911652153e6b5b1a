// Bounded JSON parsing and typed field access for the checkpoint parsers.
#include <nnx/checkpoint/detail/parse_util.h>

#include <algorithm>
#include <cstdint>

namespace nnx::checkpoint::detail {
namespace {

// Deepest nesting of [ and { outside strings; stops counting once over the limit.
int nesting_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size() && deepest <= kMaxJsonDepth; ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string Where::describe() const {
  return entry.empty() ? fmt::format("'{}'", file) : fmt::format("{} in '{}'", entry, file);
}

Where Where::at(std::string sub_entry) const { return Where{who, file, std::move(sub_entry)}; }

void Where::fail(const std::string& message) const {
  nnx::detail::throw_error(who, fmt::format("{}: {}", describe(), message));
}

Json parse_json(std::string_view text, const Where& where) {
  where.check(nesting_depth(text) <= kMaxJsonDepth, "JSON nests deeper than {} levels",
              kMaxJsonDepth);
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    where.fail(fmt::format("not valid JSON: {}", printable(e.what())));
  }
}

std::string printable(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f)
      out += static_cast<char>(c);
    else
      out += fmt::format("\\x{:02x}", c);
  }
  return out;
}

std::string shorten(std::string_view text) {
  if (text.size() <= 80) return printable(text);
  return fmt::format("{}...", printable(text.substr(0, 80)));
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("({}{})", fmt::join(shape, ", "), shape.size() == 1 ? "," : "");
}

std::string excerpt(const Json& value) {
  if (value.is_array()) return fmt::format("an array of {} entries", value.size());
  if (value.is_object()) return fmt::format("an object of {} keys", value.size());
  if (value.is_string()) return fmt::format("\"{}\"", shorten(value.get_ref<const std::string&>()));
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void check_keys(const Json& obj, std::initializer_list<std::string_view> allowed,
                const Where& where) {
  where.check(obj.is_object(), "expected a JSON object, got {}", excerpt(obj));
  for (const auto& item : obj.items()) {
    bool known = std::find(allowed.begin(), allowed.end(), item.key()) != allowed.end();
    where.check(known, "unknown key '{}'; the known keys are {}", shorten(item.key()),
                fmt::join(allowed.begin(), allowed.end(), ", "));
  }
}

const Json& field(const Json& obj, std::string_view key, const Where& where) {
  where.check(obj.is_object(), "expected a JSON object, got {}", excerpt(obj));
  auto it = obj.find(key);
  where.check(it != obj.end(), "missing required key '{}'", key);
  return *it;
}

std::string get_string(const Json& value, std::string_view what, const Where& where) {
  where.check(value.is_string(), "{} must be a string, got {}", what, excerpt(value));
  return value.get<std::string>();
}

int64_t get_int(const Json& value, std::string_view what, int64_t lo, int64_t hi,
                const Where& where) {
  bool in_range = false;
  int64_t v = 0;
  if (value.is_number_unsigned()) {
    uint64_t u = value.get<uint64_t>();
    in_range = hi >= 0 && u <= static_cast<uint64_t>(hi) && static_cast<int64_t>(u) >= lo;
    v = static_cast<int64_t>(u);
  } else if (value.is_number_integer()) {
    v = value.get<int64_t>();
    in_range = v >= lo && v <= hi;
  }
  where.check(in_range, "{} must be an integer in [{}, {}], got {}", what, lo, hi, excerpt(value));
  return v;
}

uint64_t get_uint(const Json& value, std::string_view what, const Where& where) {
  bool ok = value.is_number_unsigned() || (value.is_number_integer() && value.get<int64_t>() >= 0);
  where.check(ok, "{} must be a non-negative integer below 2^64, got {}", what, excerpt(value));
  return value.get<uint64_t>();
}

std::vector<int64_t> get_int_list(const Json& value, std::string_view what, size_t max_size,
                                  const Where& where) {
  where.check(value.is_array() && value.size() <= max_size,
              "{} must be an array of at most {} integers, got {}", what, max_size, excerpt(value));
  std::vector<int64_t> out;
  out.reserve(value.size());
  for (const auto& v : value) {
    bool ok = v.is_number_integer() &&
              !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX});
    if (!ok) where.fail(fmt::format("{} must hold integers below 2^63, got {}", what, excerpt(v)));
    out.push_back(v.get<int64_t>());
  }
  return out;
}

std::vector<std::string> close_names(const std::vector<std::string_view>& candidates,
                                     std::string_view name, size_t limit) {
  const size_t threshold = std::max<size_t>(2, name.size() / 4);
  std::vector<std::pair<size_t, std::string_view>> scored;
  if (name.size() > 512) return {};
  for (auto c : candidates) {
    size_t gap = c.size() > name.size() ? c.size() - name.size() : name.size() - c.size();
    if (gap > threshold || c.size() > 512) continue;
    size_t d = edit_distance(c, name);
    if (d <= threshold) scored.emplace_back(d, c);
  }
  std::sort(scored.begin(), scored.end());
  std::vector<std::string> out;
  for (size_t i = 0; i < scored.size() && i < limit; ++i) out.emplace_back(scored[i].second);
  return out;
}

}  // namespace nnx::checkpoint::detail
