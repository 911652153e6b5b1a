// Mesh: ranks arranged in an N-d grid with named axes (row-major, like
// np.array(devices).reshape(shape)). The sharding runtime adds communicators to it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nnx {

class Mesh {
 public:
  Mesh(std::vector<int64_t> shape, std::vector<std::string> axis_names);

  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<std::string>& axis_names() const { return axis_names_; }
  int64_t size() const;
  // Index of a named axis; throws naming the known axes when absent.
  int64_t axis_index(const std::string& name) const;
  int64_t axis_size(const std::string& name) const { return shape_[axis_index(name)]; }
  std::string to_string() const;  // Mesh('data': 2, 'model': 4)
  bool operator==(const Mesh&) const = default;

 private:
  std::vector<int64_t> shape_;
  std::vector<std::string> axis_names_;
};

}  // namespace nnx
