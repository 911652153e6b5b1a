// Filter combinators.
#include <nnx/framework/filter.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace nnx {

Filter::Filter(Predicate predicate, std::string description, bool everything)
    : predicate_(std::move(predicate)), description_(std::move(description)),
      everything_(everything) {}

Filter PathContains(std::string name) {
  auto description = fmt::format("PathContains('{}')", name);
  return Filter(
      [name = std::move(name)](const std::string& path, const Variable&) {
        size_t start = 0;
        while (start <= path.size()) {
          size_t end = path.find('.', start);
          if (end == std::string::npos) end = path.size();
          if (path.compare(start, end - start, name) == 0 && end - start == name.size())
            return true;
          start = end + 1;
        }
        return false;
      },
      std::move(description));
}

Filter Not(Filter filter) {
  auto description = "Not(" + filter.description() + ")";
  return Filter([f = std::move(filter)](const std::string& p,
                                        const Variable& v) { return !f(p, v); },
                std::move(description));
}

namespace {
std::string describe_combination(const char* name, const std::vector<Filter>& filters) {
  std::vector<std::string> parts;
  for (const auto& f : filters) parts.push_back(f.description());
  return fmt::format("{}({})", name, fmt::join(parts, ", "));
}
}  // namespace

Filter any_of(std::vector<Filter> filters) {
  auto description = describe_combination("Any", filters);
  return Filter(
      [fs = std::move(filters)](const std::string& p, const Variable& v) {
        for (const auto& f : fs)
          if (f(p, v)) return true;
        return false;
      },
      std::move(description));
}

Filter all_of(std::vector<Filter> filters) {
  auto description = describe_combination("All", filters);
  return Filter(
      [fs = std::move(filters)](const std::string& p, const Variable& v) {
        for (const auto& f : fs)
          if (!f(p, v)) return false;
        return true;
      },
      std::move(description));
}

}  // namespace nnx
