// Mesh validation, rank/coordinate maps, and the sub-communicators of a bound mesh.
#include <nnx/core/error.h>
#include <nnx/sharding/device.h>
#include <nnx/sharding/mesh.h>

#include <torch/types.h>

#include <algorithm>
#include <functional>

namespace nnx {

Mesh::Mesh(std::vector<int64_t> shape, std::vector<std::string> axis_names)
    : shape_(std::move(shape)), axis_names_(std::move(axis_names)) {
  NNX_CHECK(shape_.size() == axis_names_.size(),
            "mesh shape ({}) and axis names ({}) differ in length; give one name per axis",
            fmt::join(shape_, ", "), fmt::join(axis_names_, ", "));
  NNX_CHECK(shape_.size() <= 16, "a mesh has at most 16 axes, got {}", shape_.size());
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

std::vector<int64_t> Mesh::coordinates_of(int64_t rank) const {
  NNX_CHECK(rank >= 0 && rank < size(), "rank {} is outside a mesh of {} processes", rank, size());
  std::vector<int64_t> coords(shape_.size());
  for (int64_t d = ndim() - 1; d >= 0; --d) {
    coords[d] = rank % shape_[d];
    rank /= shape_[d];
  }
  return coords;
}

int64_t Mesh::rank_of(const std::vector<int64_t>& coordinates) const {
  NNX_CHECK(coordinates.size() == shape_.size(), "{} coordinates for a mesh of {} axes",
            coordinates.size(), shape_.size());
  int64_t rank = 0;
  for (size_t d = 0; d < shape_.size(); ++d) {
    NNX_CHECK(coordinates[d] >= 0 && coordinates[d] < shape_[d],
              "coordinate {} on axis '{}' of size {}", coordinates[d], axis_names_[d], shape_[d]);
    rank = rank * shape_[d] + coordinates[d];
  }
  return rank;
}

int64_t Mesh::rank() const {
  NNX_CHECK(is_bound(), "{} is a description only; use nnx::make_mesh for a mesh of processes",
            to_string());
  return comms_.rbegin()->second.rank();  // the all-axes communicator is the world, in order
}

const std::vector<int64_t>& Mesh::coordinates() const {
  NNX_CHECK(is_bound(), "{} is a description only; use nnx::make_mesh for a mesh of processes",
            to_string());
  return coordinates_;
}

uint64_t Mesh::axes_mask(const std::vector<std::string>& axes) const {
  uint64_t mask = 0;
  for (const auto& a : axes) {
    uint64_t bit = uint64_t{1} << axis_index(a);
    NNX_CHECK(!(mask & bit), "axis '{}' is named twice in ({})", a, fmt::join(axes, ", "));
    mask |= bit;
  }
  return mask;
}

const Communicator& Mesh::comm(const std::vector<std::string>& axes) const {
  NNX_CHECK(is_bound(), "{} is a description only; use nnx::make_mesh for a mesh of processes",
            to_string());
  uint64_t mask = axes_mask(axes);
  NNX_CHECK(mask != 0, "a communicator needs at least one axis of {}", to_string());
  return comms_.at(mask);
}

const Communicator& Mesh::gradient_comm(const std::vector<std::string>& axes) const {
  const Communicator& base = comm(axes);
  uint64_t mask = axes_mask(axes);
  auto it = gradient_comms_.find(mask);
  if (it == gradient_comms_.end())
    it = gradient_comms_.emplace(mask, base.duplicate(base.name() + "/gradients")).first;
  return it->second;
}

std::shared_ptr<const Mesh> make_mesh(std::vector<int64_t> shape,
                                      std::vector<std::string> axis_names) {
  auto mesh = std::make_shared<Mesh>(std::move(shape), std::move(axis_names));
  auto world = Communicator::world();
  NNX_CHECK(mesh->size() == world.size(),
            "{} has {} positions but the world has {} processes; run with mpirun -np {} or "
            "choose a mesh whose sizes multiply to {}",
            mesh->to_string(), mesh->size(), world.size(), mesh->size(), world.size());
  // Every rank must build the same mesh, or the communicators below would pair up wrongly.
  constexpr int64_t kWords = 10;
  auto mine = torch::zeros({kWords}, torch::kLong);
  mine[0] = mesh->ndim();
  for (int64_t d = 0; d < std::min<int64_t>(mesh->ndim(), kWords - 2); ++d)
    mine[1 + d] = mesh->shape_[d];
  mine[kWords - 1] = static_cast<int64_t>(std::hash<std::string>{}(mesh->to_string()) >> 2);
  auto calls = world.all_gather(mine, 0).reshape({world.size(), kWords});
  auto described = [&](int64_t r) {
    std::vector<int64_t> sizes;
    for (int64_t d = 0; d < std::min<int64_t>(calls[r][0].item<int64_t>(), kWords - 2); ++d)
      sizes.push_back(calls[r][1 + d].item<int64_t>());
    return fmt::format("rank {}: shape ({})", r, fmt::join(sizes, ", "));
  };
  std::vector<std::string> differing;
  for (int64_t r = 1; r < world.size(); ++r)
    if (!torch::equal(calls[r], calls[0])) differing.push_back(described(r));
  NNX_CHECK(differing.empty(),
            "the ranks build different meshes: {}, {}; make_mesh needs the same shape and axis "
            "names on every rank (this rank, {}, builds {})", described(0),
            fmt::join(differing, ", "), world.rank(), mesh->to_string());
  auto coords = mesh->coordinates_of(world.rank());
  mesh->coordinates_ = coords;
  mesh->device_ = default_device();
  const uint64_t all = (uint64_t{1} << mesh->ndim()) - 1;
  for (uint64_t mask = 1; mask <= all; ++mask) {
    // color: position on the axes outside the mask; key: position on the axes inside it.
    int64_t color = 0, key = 0;
    std::vector<std::string> names;
    for (int64_t d = 0; d < mesh->ndim(); ++d) {
      if (mask & (uint64_t{1} << d)) {
        key = key * mesh->shape_[d] + coords[d];
        names.push_back(mesh->axis_names_[d]);
      } else {
        color = color * mesh->shape_[d] + coords[d];
      }
    }
    mesh->comms_.emplace(mask, world.split(static_cast<int>(color), static_cast<int>(key),
                                           fmt::format("{}", fmt::join(names, "+"))));
  }
  return mesh;
}

}  // namespace nnx
