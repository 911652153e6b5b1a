// Metadata merging and JSON/text forms.
#include <nnx/core/error.h>
#include <nnx/sharding/metadata.h>

namespace nnx {

using nlohmann::json;

namespace {

json entry_to_json(const SpecEntry& e) {
  if (e.is_none()) return nullptr;
  if (e.names().size() == 1) return e.names()[0];
  return e.names();
}

SpecEntry entry_from_json(const json& j) {
  if (j.is_null()) return SpecEntry{};
  if (j.is_string()) return SpecEntry(j.get<std::string>());
  NNX_CHECK(j.is_array(), "spec entry must be null, a string or a list of strings, got {}",
            j.dump());
  return SpecEntry(j.get<std::vector<std::string>>());
}

}  // namespace

json to_json(const PartitionSpec& spec) {
  json out = json::array();
  for (const auto& e : spec.entries()) out.push_back(entry_to_json(e));
  return out;
}

PartitionSpec partition_spec_from_json(const json& j) {
  NNX_CHECK(j.is_array(), "a PartitionSpec is a JSON list, got {}", j.dump());
  std::vector<SpecEntry> entries;
  for (const auto& e : j) entries.push_back(entry_from_json(e));
  return PartitionSpec(std::move(entries));
}

Metadata Metadata::merged_with(const Metadata& over) const {
  Metadata out = *this;
  if (over.out_sharding) out.out_sharding = over.out_sharding;
  if (over.sharding_rules) out.sharding_rules = over.sharding_rules;
  if (over.optimizer_sharding) out.optimizer_sharding = over.optimizer_sharding;
  if (over.extra.is_object())
    for (const auto& [k, v] : over.extra.items()) out.extra[k] = v;
  return out;
}

bool Metadata::empty() const {
  return !out_sharding && !sharding_rules && !optimizer_sharding &&
         (extra.is_null() || extra.empty());
}

json Metadata::to_json() const {
  json j = json::object();
  if (out_sharding) j["out_sharding"] = nnx::to_json(*out_sharding);
  if (sharding_rules) {
    json rules = json::array();
    for (const auto& r : *sharding_rules) rules.push_back({r.logical, entry_to_json(r.mesh)});
    j["sharding_rules"] = rules;
  }
  if (optimizer_sharding) j["optimizer_sharding"] = nnx::to_json(*optimizer_sharding);
  if (extra.is_object())
    for (const auto& [k, v] : extra.items()) {
      NNX_CHECK(k != "out_sharding" && k != "sharding_rules" && k != "optimizer_sharding",
                "free-form metadata key '{}' is reserved; set Metadata::{} instead", k, k);
      j[k] = v;
    }
  return j;
}

Metadata Metadata::from_json(const json& j) {
  NNX_CHECK(j.is_object(), "metadata must be a JSON object, got {}", j.dump());
  Metadata m;
  for (const auto& [k, v] : j.items()) {
    if (k == "out_sharding") {
      m.out_sharding = partition_spec_from_json(v);
    } else if (k == "optimizer_sharding") {
      m.optimizer_sharding = partition_spec_from_json(v);
    } else if (k == "sharding_rules") {
      ShardingRules rules;
      for (const auto& r : v) {
        NNX_CHECK(r.is_array() && r.size() == 2 && r[0].is_string(),
                  "a sharding rule is [logical, mesh], got {}", r.dump());
        rules.push_back({r[0].get<std::string>(), entry_from_json(r[1])});
      }
      m.sharding_rules = std::move(rules);
    } else {
      m.extra[k] = v;
    }
  }
  return m;
}

std::string Metadata::to_string() const {
  std::vector<std::string> parts;
  if (out_sharding) parts.push_back("out_sharding=" + out_sharding->to_string());
  if (sharding_rules) {
    std::vector<std::string> rules;
    for (const auto& r : *sharding_rules)
      rules.push_back(fmt::format("('{}', {})", r.logical, r.mesh.to_string()));
    parts.push_back(fmt::format("sharding_rules=({})", fmt::join(rules, ", ")));
  }
  if (optimizer_sharding) parts.push_back("optimizer_sharding=" + optimizer_sharding->to_string());
  if (extra.is_object())
    for (const auto& [k, v] : extra.items()) parts.push_back(k + "=" + v.dump());
  return fmt::format("{}", fmt::join(parts, " "));
}

}  // namespace nnx
