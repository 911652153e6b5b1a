// Resolving the specs of a State's variables.
#include <nnx/core/error.h>
#include <nnx/sharding/logical_rules.h>
#include <nnx/sharding/spec_check.h>
#include <nnx/framework/state_sharding.h>

namespace nnx {

PartitionSpec resolve_partition_spec(const Metadata& md, size_t rank, const std::string& what) {
  if (!md.out_sharding) return pad_spec(P(), rank);
  auto rules = combine_rules(current_logical_axis_rules(),
                             md.sharding_rules.value_or(ShardingRules{}),
                             fmt::format("{} (its sharding_rules and the active scope)", what));
  return pad_spec(apply_rules(*md.out_sharding, rules), std::max(rank, md.out_sharding->size()));
}

PartitionSpec checked_partition_spec(const Metadata& md, const Shape& shape, const Mesh& mesh,
                                     const std::string& what) {
  auto spec = resolve_partition_spec(md, shape.size(), what);
  check_spec(spec, shape, mesh, what, /*after_rules=*/true);
  return spec;
}

PartitionSpec resolve_partition_spec(const std::string& path, const Variable& variable) {
  return resolve_partition_spec(variable.metadata(), variable.shape().size(),
                                fmt::format("'{}'", path));
}

PathMap<PartitionSpec> get_partition_spec(const State& state) {
  PathMap<PartitionSpec> out;
  for (const auto& [path, v] : state) out.emplace_back(path, resolve_partition_spec(path, v));
  return out;
}

PathMap<NamedSharding> get_named_sharding(const State& state, std::shared_ptr<const Mesh> mesh) {
  NNX_CHECK(mesh != nullptr, "get_named_sharding needs a mesh, got none (null); pass one, such "
            "as nnx::current_mesh() inside a MeshContext");
  PathMap<NamedSharding> out;
  for (const auto& [path, v] : state) {
    auto spec = resolve_partition_spec(path, v);
    check_spec(spec, v.shape(), *mesh, path, /*after_rules=*/true);
    out.emplace_back(path, NamedSharding{mesh, spec});
  }
  return out;
}

}  // namespace nnx
