// Mesh: processes arranged in an N-d grid with named axes, row-major like
// np.array(devices).reshape(shape). make_mesh binds it to the MPI world with one cached
// communicator per subset of axes; a Mesh built directly is a description only (AbstractMesh).
#pragma once

#include <nnx/sharding/communicator.h>

#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace nnx {

class Mesh {
 public:
  // A description: shape and axis names, no processes (for specs, shapes and restore targets).
  Mesh(std::vector<int64_t> shape, std::vector<std::string> axis_names);

  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<std::string>& axis_names() const { return axis_names_; }
  int64_t ndim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size() const;
  // Index of a named axis; throws naming the known axes when absent.
  int64_t axis_index(const std::string& name) const;
  int64_t axis_size(const std::string& name) const { return shape_[axis_index(name)]; }
  std::string to_string() const;  // Mesh('data': 2, 'model': 4)
  bool operator==(const Mesh& other) const {
    return shape_ == other.shape_ && axis_names_ == other.axis_names_;
  }

  // Row-major rank <-> coordinates.
  std::vector<int64_t> coordinates_of(int64_t rank) const;
  int64_t rank_of(const std::vector<int64_t>& coordinates) const;

  // Bound meshes only (make_mesh): this process's rank and coordinates, and the communicator
  // over `axes` (members share coordinates on the other axes; ordered row-major over `axes`).
  bool is_bound() const { return !comms_.empty(); }
  int64_t rank() const;
  const std::vector<int64_t>& coordinates() const;
  int64_t coordinate(const std::string& axis) const { return coordinates()[axis_index(axis)]; }
  const Communicator& comm(const std::vector<std::string>& axes) const;
  const Communicator& comm(const std::string& axis) const { return comm(std::vector{axis}); }
  // A duplicate of comm(axes) for gradient reduction, so reductions in flight never match the
  // backward pass's own collectives. Collective the first time each set of axes asks for it.
  const Communicator& gradient_comm(const std::vector<std::string>& axes) const;
  // The device of this process's blocks: nnx::default_device() when make_mesh ran (each
  // process its own; not part of the mesh's identity), the CPU for a description.
  c10::Device device() const { return device_; }

 private:
  friend std::shared_ptr<const Mesh> make_mesh(std::vector<int64_t>, std::vector<std::string>);
  uint64_t axes_mask(const std::vector<std::string>& axes) const;

  std::vector<int64_t> shape_;
  std::vector<std::string> axis_names_;
  std::map<uint64_t, Communicator> comms_;  // by bitmask of axes; filled by make_mesh
  mutable std::map<uint64_t, Communicator> gradient_comms_;  // made on first use
  std::vector<int64_t> coordinates_;        // this process's, set by make_mesh
  c10::Device device_{c10::kCPU};
};

// The MPI world as a mesh: make_mesh({2, 4}, {"data", "model"}). The sizes must multiply to the
// world size; this is collective (every process calls it, in the same order).
std::shared_ptr<const Mesh> make_mesh(std::vector<int64_t> shape,
                                      std::vector<std::string> axis_names);

}  // namespace nnx
