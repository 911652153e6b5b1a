// Scoped logical axis rules and their application to specs.
#include <nnx/core/error.h>
#include <nnx/sharding/logical_rules.h>

#include <vector>

namespace nnx {

namespace {
thread_local std::vector<ShardingRules> scopes;
}

LogicalAxisRules::LogicalAxisRules(ShardingRules rules) {
  // Checks the new rules against the active ones before taking them.
  combine_rules(current_logical_axis_rules(), rules, "logical_axis_rules scope");
  scopes.push_back(std::move(rules));
}

LogicalAxisRules::~LogicalAxisRules() { scopes.pop_back(); }

ShardingRules current_logical_axis_rules() {
  ShardingRules all;
  for (const auto& s : scopes) all = combine_rules(all, s, "logical_axis_rules scope");
  return all;
}

ShardingRules combine_rules(const ShardingRules& first, const ShardingRules& second,
                            const std::string& where) {
  ShardingRules out;
  auto add = [&](const AxisRule& rule) {
    for (const auto& have : out) {
      if (have.logical != rule.logical) continue;
      NNX_CHECK(have.mesh == rule.mesh,
                "conflicting sharding rules in {}: '{}' -> {} and '{}' -> {}; keep one rule per "
                "logical name",
                where, rule.logical, have.mesh.to_string(), rule.logical, rule.mesh.to_string());
      return;
    }
    out.push_back(rule);
  };
  for (const auto& r : first) add(r);
  for (const auto& r : second) add(r);
  return out;
}

PartitionSpec apply_rules(const PartitionSpec& spec, const ShardingRules& rules) {
  std::vector<SpecEntry> entries;
  for (const auto& entry : spec.entries()) {
    std::vector<std::string> axes;
    for (const auto& name : entry.names()) {
      const AxisRule* rule = nullptr;
      for (const auto& r : rules)
        if (r.logical == name) rule = &r;
      if (rule == nullptr) axes.push_back(name);
      else
        for (const auto& a : rule->mesh.names()) axes.push_back(a);
    }
    entries.push_back(SpecEntry(std::move(axes)));
  }
  return PartitionSpec(std::move(entries));
}

}  // namespace nnx
