// PartitionSpec text forms.
#include <nnx/sharding/partition_spec.h>

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace nnx {

SpecEntry::SpecEntry(std::initializer_list<std::string_view> names) {
  for (auto n : names) names_.emplace_back(n);
}

std::string SpecEntry::to_string() const {
  if (names_.empty()) return "None";
  if (names_.size() == 1) return fmt::format("'{}'", names_[0]);
  std::vector<std::string> quoted;
  for (const auto& n : names_) quoted.push_back(fmt::format("'{}'", n));
  return fmt::format("({})", fmt::join(quoted, ", "));
}

std::vector<std::string> PartitionSpec::axis_names() const {
  std::vector<std::string> out;
  for (const auto& e : entries_)
    for (const auto& n : e.names()) out.push_back(n);
  return out;
}

std::string PartitionSpec::to_string() const {
  std::vector<std::string> parts;
  for (const auto& e : entries_) parts.push_back(e.to_string());
  return fmt::format("PartitionSpec({})", fmt::join(parts, ", "));
}

bool contains(const Axes& axes, const std::string& axis) {
  return std::find(axes.begin(), axes.end(), axis) != axes.end();
}

}  // namespace nnx
