// PartitionSpec validation.
#include <nnx/core/error.h>
#include <nnx/sharding/spec_check.h>

#include <algorithm>
#include <cstdint>

namespace nnx {

void check_spec(const PartitionSpec& spec, const Shape& shape, const Mesh& mesh,
                std::string_view what, bool after_rules) {
  NNX_CHECK(spec.size() <= shape.size(),
            "{}: {} has {} entries but the array has rank {} (shape {}); give at most one entry "
            "per dim",
            what, spec.to_string(), spec.size(), shape.size(), to_string(shape));
  const auto& names = mesh.axis_names();
  uint64_t used = 0;  // mesh axes already sharding a dim, by index (a mesh has at most 16)
  for (size_t d = 0; d < spec.size(); ++d) {
    int64_t ways = 1;
    for (const auto& axis : spec[d].names()) {
      const auto found = std::find(names.begin(), names.end(), axis);
      NNX_CHECK(found != names.end(), "{}: {} names axis '{}', which {} does not have; use one "
                "of ({}){}",
                what, spec.to_string(), axis, mesh.to_string(), fmt::join(names, ", "),
                after_rules ? fmt::format(" or add a sharding rule for the logical name '{}'", axis)
                            : std::string(" (here a spec names mesh axes, not logical names)"));
      const auto index = static_cast<size_t>(found - names.begin());
      NNX_CHECK(!(used >> index & 1),
                "{}: {} uses mesh axis '{}' twice; a mesh axis can shard one dim only", what,
                spec.to_string(), axis);
      used |= uint64_t{1} << index;
      ways *= mesh.shape()[index];
    }
    NNX_CHECK(shape[d] % ways == 0,
              "{}: dim {} of size {} is not divisible by {} (axes {} of {}); choose sizes that "
              "divide, or shard another dim",
              what, d, shape[d], ways, spec[d].to_string(), mesh.to_string());
  }
}

PartitionSpec pad_spec(const PartitionSpec& spec, size_t rank) {
  auto entries = spec.entries();
  if (entries.size() < rank) entries.resize(rank);
  return PartitionSpec(std::move(entries));
}

}  // namespace nnx
