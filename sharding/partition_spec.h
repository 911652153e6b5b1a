// PartitionSpec (alias P): per array dim, no mesh axis, one axis name, or a tuple of names,
// as jax.sharding.PartitionSpec. Names may be mesh axes or logical names (see sharding_rules).
#pragma once

#include <concepts>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nnx {

// Written where JAX writes None: P("data", nnx::none).
inline constexpr std::nullopt_t none = std::nullopt;

// One entry of a spec: empty = none (replicated along that dim), else the axes, major first.
class SpecEntry {
 public:
  SpecEntry() = default;
  SpecEntry(std::nullopt_t) {}
  SpecEntry(std::nullptr_t) {}
  SpecEntry(const char* name) : names_{name} {}
  SpecEntry(std::string name) : names_{std::move(name)} {}
  SpecEntry(std::initializer_list<std::string_view> names);
  explicit SpecEntry(std::vector<std::string> names) : names_(std::move(names)) {}

  bool is_none() const { return names_.empty(); }
  const std::vector<std::string>& names() const { return names_; }
  std::string to_string() const;  // None, 'data', ('data', 'model')
  bool operator==(const SpecEntry&) const = default;

 private:
  std::vector<std::string> names_;
};

// Mesh axis names, e.g. the axes one dim is split over, major first.
using Axes = std::vector<std::string>;
bool contains(const Axes& axes, const std::string& axis);

class PartitionSpec {
 public:
  PartitionSpec() = default;
  // From a vector of entries (a template, so that a braced list never lands here).
  template <class V>
    requires std::same_as<V, std::vector<SpecEntry>>
  explicit PartitionSpec(V entries) : entries_(std::move(entries)) {}

  size_t size() const { return entries_.size(); }
  const SpecEntry& operator[](size_t dim) const { return entries_.at(dim); }
  const std::vector<SpecEntry>& entries() const { return entries_; }
  // Every axis name used, in order of appearance.
  std::vector<std::string> axis_names() const;
  std::string to_string() const;  // PartitionSpec('data', None)
  bool operator==(const PartitionSpec&) const = default;

 private:
  std::vector<SpecEntry> entries_;
};

// P(...): one argument per dim, as JAX's P: P("data", nnx::none), P({"fsdp", "model"}) (one
// dim split over two axes, fsdp major), P({"b", "a"}, nnx::none). Functions, not constructors,
// so that a braced list is always one tuple entry.
inline PartitionSpec P() { return {}; }
inline PartitionSpec P(SpecEntry d0) { return PartitionSpec(std::vector<SpecEntry>{std::move(d0)}); }
inline PartitionSpec P(SpecEntry d0, SpecEntry d1) {
  return PartitionSpec(std::vector<SpecEntry>{std::move(d0), std::move(d1)});
}
inline PartitionSpec P(SpecEntry d0, SpecEntry d1, SpecEntry d2) {
  return PartitionSpec(std::vector<SpecEntry>{std::move(d0), std::move(d1), std::move(d2)});
}
inline PartitionSpec P(SpecEntry d0, SpecEntry d1, SpecEntry d2, SpecEntry d3) {
  return PartitionSpec(
      std::vector<SpecEntry>{std::move(d0), std::move(d1), std::move(d2), std::move(d3)});
}
inline PartitionSpec P(SpecEntry d0, SpecEntry d1, SpecEntry d2, SpecEntry d3, SpecEntry d4) {
  return PartitionSpec(std::vector<SpecEntry>{std::move(d0), std::move(d1), std::move(d2),
                                              std::move(d3), std::move(d4)});
}
inline PartitionSpec P(SpecEntry d0, SpecEntry d1, SpecEntry d2, SpecEntry d3, SpecEntry d4,
                       SpecEntry d5) {
  return PartitionSpec(std::vector<SpecEntry>{std::move(d0), std::move(d1), std::move(d2),
                                              std::move(d3), std::move(d4), std::move(d5)});
}

}  // namespace nnx
