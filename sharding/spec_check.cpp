// PartitionSpec validation.
#include <nnx/core/error.h>
#include <nnx/sharding/spec_check.h>

#include <set>

namespace nnx {

void check_spec(const PartitionSpec& spec, const Shape& shape, const Mesh& mesh,
                const std::string& what) {
  NNX_CHECK(spec.size() <= shape.size(),
            "{}: {} has {} entries but the array has rank {} (shape {}); give at most one entry "
            "per dim",
            what, spec.to_string(), spec.size(), shape.size(), to_string(shape));
  std::set<std::string> used;
  for (size_t d = 0; d < spec.size(); ++d) {
    int64_t ways = 1;
    for (const auto& axis : spec[d].names()) {
      auto names = mesh.axis_names();
      NNX_CHECK(std::find(names.begin(), names.end(), axis) != names.end(),
                "{}: {} names axis '{}', which {} does not have; use one of ({}) or add a "
                "sharding rule for the logical name '{}'",
                what, spec.to_string(), axis, mesh.to_string(), fmt::join(names, ", "), axis);
      NNX_CHECK(used.insert(axis).second,
                "{}: {} uses mesh axis '{}' twice; a mesh axis can shard one dim only", what,
                spec.to_string(), axis);
      ways *= mesh.axis_size(axis);
    }
    NNX_CHECK(shape[d] % ways == 0,
              "{}: dim {} of size {} is not divisible by {} (axes {} of {}); choose sizes that "
              "divide, or shard another dim",
              what, d, shape[d], ways, spec[d].to_string(), mesh.to_string());
  }
}

PartitionSpec pad_spec(const PartitionSpec& spec, size_t rank) {
  auto entries = spec.entries();
  while (entries.size() < rank) entries.emplace_back();
  return PartitionSpec(std::move(entries));
}

}  // namespace nnx
