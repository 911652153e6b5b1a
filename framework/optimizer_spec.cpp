// Resolving optimizer_sharding into the layout of a parameter's optimizer state.
#include <nnx/core/error.h>
#include <nnx/framework/optimizer_spec.h>
#include <nnx/sharding/spec_check.h>
#include <nnx/framework/state_sharding.h>

#include <algorithm>

namespace nnx {

std::optional<PartitionSpec> optimizer_spec(const std::string& path, const Variable& param) {
  const Metadata& md = param.metadata();
  const Array& value = param.value();
  if (!md.optimizer_sharding || !value.mesh()) return std::nullopt;
  NNX_CHECK(value.partial_axes().empty(),
            "'{}' is a pending sum over ({}); resolve it (redistribute) before optimizing it", path,
            fmt::join(value.partial_axes(), ", "));
  const size_t rank = value.shape().size();
  Metadata as_out = md;
  as_out.out_sharding = md.optimizer_sharding;
  const std::string what = fmt::format("'{}' (its optimizer_sharding)", path);
  PartitionSpec extra = checked_partition_spec(as_out, value.shape(), *value.mesh(), what);
  PartitionSpec own = pad_spec(value.spec(), rank);
  std::vector<std::string> used = own.axis_names();
  std::vector<SpecEntry> entries;
  bool added = false;
  for (size_t d = 0; d < rank; ++d) {
    std::vector<std::string> axes = own[d].names();
    for (const auto& a : extra[d].names())
      if (std::find(used.begin(), used.end(), a) == used.end()) {
        axes.push_back(a);  // minor to the parameter's axes: a slice of this rank's block
        added = true;
      }
    entries.emplace_back(std::move(axes));
  }
  if (!added) return std::nullopt;
  PartitionSpec spec(std::move(entries));
  check_spec(spec, value.shape(), *value.mesh(),
             fmt::format("'{}' (its spec {} with optimizer_sharding {})", path,
                         own.to_string(), md.optimizer_sharding->to_string()));
  return spec;
}

}  // namespace nnx
