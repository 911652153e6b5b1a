// Mesh validation and lookups.
#include <nnx/framework/error.h>
#include <nnx/sharding/mesh.h>

#include <algorithm>

namespace nnx {

Mesh::Mesh(std::vector<int64_t> shape, std::vector<std::string> axis_names)
    : shape_(std::move(shape)), axis_names_(std::move(axis_names)) {
  NNX_CHECK(shape_.size() == axis_names_.size(),
            "mesh shape ({}) and axis names ({}) differ in length; give one name per axis",
            fmt::join(shape_, ", "), fmt::join(axis_names_, ", "));
  for (size_t i = 0; i < shape_.size(); ++i) {
    NNX_CHECK(shape_[i] >= 1, "mesh axis '{}' has size {}; sizes must be >= 1", axis_names_[i],
              shape_[i]);
    NNX_CHECK(std::count(axis_names_.begin(), axis_names_.end(), axis_names_[i]) == 1,
              "mesh axis name '{}' is used twice; names must be distinct", axis_names_[i]);
  }
}

int64_t Mesh::size() const {
  int64_t n = 1;
  for (auto s : shape_) n *= s;
  return n;
}

int64_t Mesh::axis_index(const std::string& name) const {
  auto it = std::find(axis_names_.begin(), axis_names_.end(), name);
  NNX_CHECK(it != axis_names_.end(), "unknown mesh axis '{}'; the mesh has axes ({})", name,
            fmt::join(axis_names_, ", "));
  return it - axis_names_.begin();
}

std::string Mesh::to_string() const {
  std::vector<std::string> parts;
  for (size_t i = 0; i < shape_.size(); ++i)
    parts.push_back(fmt::format("'{}': {}", axis_names_[i], shape_[i]));
  return fmt::format("Mesh({})", fmt::join(parts, ", "));
}

}  // namespace nnx
