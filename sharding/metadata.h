// Variable metadata with Flax's names: out_sharding, sharding_rules, optimizer_sharding, and
// free-form JSON entries. Metadata travels with the variable through split, merge and state.
#pragma once

#include <nnx/sharding/partition_spec.h>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace nnx {

// One logical axis rule: logical name -> mesh axis (or axes, or none), as Flax's rules.
struct AxisRule {
  std::string logical;
  SpecEntry mesh;
  bool operator==(const AxisRule&) const = default;
};
using ShardingRules = std::vector<AxisRule>;

struct Metadata {
  std::optional<PartitionSpec> out_sharding;       // per-dim mesh or logical axis names
  std::optional<ShardingRules> sharding_rules;     // logical -> mesh, for this variable
  std::optional<PartitionSpec> optimizer_sharding; // further sharding of optimizer state
  nlohmann::json extra = nlohmann::json::object(); // free-form JSON-able entries

  // This metadata with every entry that `over` sets replaced by over's.
  Metadata merged_with(const Metadata& over) const;
  bool empty() const;
  nlohmann::json to_json() const;
  static Metadata from_json(const nlohmann::json& j);
  std::string to_string() const;  // compact, for state listings; "" when empty
  bool operator==(const Metadata&) const = default;
};

nlohmann::json to_json(const PartitionSpec& spec);
PartitionSpec partition_spec_from_json(const nlohmann::json& j);

}  // namespace nnx
