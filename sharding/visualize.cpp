// Text pictures of array layouts: one cell per distinct block, listing the ranks holding it.
#include <nnx/core/error.h>
#include <nnx/sharding/spec_check.h>
#include <nnx/sharding/visualize.h>

#include <algorithm>
#include <map>
#include <set>

namespace nnx {

std::string visualize_sharding(const Array& array) {
  if (!array.mesh()) {
    Mesh one({1}, {"_"});
    return visualize_sharding(array.shape(), {std::make_shared<Mesh>(one), P()});
  }
  return visualize_sharding(array.shape(), *array.sharding(), array.partial_axes());
}

std::string visualize_sharding(const Shape& shape, const NamedSharding& sharding,
                               const std::vector<std::string>& partial_axes) {
  NNX_CHECK(shape.size() == 1 || shape.size() == 2,
            "can draw 1-d and 2-d arrays only, got shape {}", to_string(shape));
  NNX_CHECK(sharding.mesh != nullptr, "the sharding names no mesh (null)");
  const Mesh& mesh = *sharding.mesh;
  auto spec = pad_spec(sharding.spec, shape.size());
  check_spec(spec, shape, mesh, "visualize_sharding");
  // Block (row index, column index) -> ranks holding it.
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> holders;
  std::set<int64_t> rows, cols;
  for (int64_t r = 0; r < mesh.size(); ++r) {
    Box box = block_of(shape, spec, mesh, mesh.coordinates_of(r));
    // A 1-d array is drawn as one row, as JAX does.
    int64_t row = shape.size() == 2 ? box.start[0] : 0;
    int64_t col = shape.size() == 2 ? box.start[1] : box.start[0];
    holders[{row, col}].push_back(r);
    rows.insert(row);
    cols.insert(col);
  }
  std::vector<std::string> labels;
  size_t width = 0;
  for (const auto& [block, ranks] : holders) {
    labels.push_back(fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ",")));
    width = std::max(width, labels.back().size());
  }
  width += 2;
  const size_t ncols = cols.size();
  std::string rule = "+";
  for (size_t c = 0; c < ncols; ++c) rule += std::string(width, '-') + "+";
  std::string out = rule + "\n";
  size_t i = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    std::string line = "|";
    for (size_t c = 0; c < ncols; ++c, ++i) {
      const auto& label = labels[i];
      size_t left = (width - label.size()) / 2;
      line += std::string(left, ' ') + label + std::string(width - left - label.size(), ' ') + "|";
    }
    out += line + "\n" + rule + "\n";
  }
  std::string note = fmt::format("shape {} {} on {}", to_string(shape), spec.to_string(),
                                 mesh.to_string());
  if (!partial_axes.empty())
    note += fmt::format(" (pending sum over {})", fmt::join(partial_axes, ", "));
  return out + note + "\n";
}

}  // namespace nnx
