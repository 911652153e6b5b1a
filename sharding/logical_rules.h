// Logical axis names ('batch', 'embed', 'mlp') mapped to mesh axes through sharding rules,
// given per variable (metadata.sharding_rules) or by a scope:
//   nnx::LogicalAxisRules rules({{"batch", "data"}, {"mlp", "model"}, {"embed", nnx::none}});
#pragma once

#include <nnx/sharding/metadata.h>
#include <nnx/sharding/partition_spec.h>

#include <initializer_list>
#include <string>

namespace nnx {

// While alive, its rules apply on this thread (scopes nest; a conflicting rule is an error).
class LogicalAxisRules {
 public:
  explicit LogicalAxisRules(ShardingRules rules);
  LogicalAxisRules(std::initializer_list<AxisRule> rules) : LogicalAxisRules(ShardingRules(rules)) {}
  ~LogicalAxisRules();
  LogicalAxisRules(const LogicalAxisRules&) = delete;
  LogicalAxisRules& operator=(const LogicalAxisRules&) = delete;
};

// The rules of every active scope, outer first.
ShardingRules current_logical_axis_rules();

// `first` and `second` together; a logical name mapped to two different targets is an error
// naming `where` (never last-one-wins).
ShardingRules combine_rules(const ShardingRules& first, const ShardingRules& second,
                            const std::string& where);

// Replaces each name a rule maps by the rule's target (none, an axis, or axes); other names
// are kept (they may be mesh axes already).
PartitionSpec apply_rules(const PartitionSpec& spec, const ShardingRules& rules);

}  // namespace nnx
