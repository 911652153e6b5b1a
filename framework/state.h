// State: an ordered map from dotted path ("blocks.0.attn.kernel") to variable handle. A variable
// shared by several paths appears once, under the first path met in field order.
#pragma once

#include <nnx/framework/filter.h>
#include <nnx/framework/variable.h>

#include <nlohmann/json.hpp>

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace nnx {

class State {
 public:
  using Entry = std::pair<std::string, Variable>;

  State() = default;
  // Adds a variable under a new path; a path already present is an error.
  void add(std::string path, Variable variable);

  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  bool contains(const std::string& path) const { return index_.count(path) > 0; }
  // The variable at `path`; an unknown path is an error that lists close matches.
  const Variable& at(const std::string& path) const;
  Variable& at(const std::string& path);
  const Variable& operator[](const std::string& path) const { return at(path); }
  Variable& operator[](const std::string& path) { return at(path); }
  std::vector<std::string> paths() const;

  auto begin() const { return entries_.begin(); }
  auto end() const { return entries_.end(); }
  auto begin() { return entries_.begin(); }
  auto end() { return entries_.end(); }

  // The entries a filter selects (Flax's state.filter).
  State filter(const Filter& filter) const;
  // This state and `other` together; a path in both is an error.
  State merged_with(const State& other) const;
  // Number of elements and bytes over all variables.
  int64_t numel() const;
  int64_t nbytes() const;

  // One line per variable: path, kind, dtype[shape], metadata.
  std::string to_string() const;
  // [{"path", "kind", "dtype", "shape", "metadata"[, "value"]}] in order; values as nested lists
  // (an error for a value not held whole by this rank: sharded, or a pending sum).
  nlohmann::json to_json(bool with_values = false) const;

 private:
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace nnx
