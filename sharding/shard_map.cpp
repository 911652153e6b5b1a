// shard_map's context, inputs/outputs, and the collectives of its bodies.
#include <nnx/core/error.h>
#include <nnx/sharding/detail/differentiable_collectives.h>
#include <nnx/sharding/detail/replication_check.h>
#include <nnx/sharding/shard_map.h>
#include <nnx/sharding/spec_check.h>

#include <torch/types.h>

#include <algorithm>

namespace nnx {

namespace detail {

namespace {
thread_local const Mesh* running_mesh = nullptr;
}

const Mesh& current_shard_map_mesh(const char* who) {
  if (running_mesh == nullptr)
    throw_error(who, "called outside a shard_map body; collectives over named axes run inside "
                     "nnx::shard_map");
  return *running_mesh;
}

ShardMapScope::ShardMapScope(const Mesh& mesh) : previous_(running_mesh) { running_mesh = &mesh; }
ShardMapScope::~ShardMapScope() { running_mesh = previous_; }

Array shard_map_input(const Array& x, const std::shared_ptr<const Mesh>& mesh,
                      const PartitionSpec& spec) {
  NNX_CHECK(mesh != nullptr, "shard_map needs a mesh, got none (null)");
  if (!x.mesh()) return device_put(x.local(), {mesh, spec});
  NNX_CHECK(*x.mesh() == *mesh, "an input lies on {} but shard_map runs on {}",
            x.mesh()->to_string(), mesh->to_string());
  return redistribute(x, spec);
}

Array shard_map_input(const at::Tensor& x, const std::shared_ptr<const Mesh>& mesh,
                      const PartitionSpec& spec) {
  return device_put(x, {mesh, spec});
}

Array shard_map_output(const at::Tensor& local, const std::shared_ptr<const Mesh>& mesh,
                       const PartitionSpec& spec, size_t index) {
  if (Communicator::checking()) check_shard_map_output(*mesh, local, spec, index);
  NNX_CHECK(spec.size() <= static_cast<size_t>(local.dim()),
            "out spec {} is longer than the output's rank {}", spec.to_string(), local.dim());
  Shape shape = local.sizes().vec();
  auto padded = pad_spec(spec, shape.size());
  for (size_t d = 0; d < padded.size(); ++d)
    for (const auto& a : padded[d].names()) shape[d] *= mesh->axis_size(a);
  return Array::from_local(local, shape, NamedSharding{mesh, padded});
}

void check_spec_count(size_t given, size_t expected, const char* what) {
  NNX_CHECK(given == expected, "shard_map got {} value(s) for {} {}; give one spec per value",
            given, expected, what);
}

}  // namespace detail

namespace {
// The communicator over `axes` of the running shard_map's mesh; errors are `who`'s.
const Communicator& axis_comm(const std::vector<std::string>& axes, const char* who) {
  const Mesh& mesh = detail::current_shard_map_mesh(who);
  for (const auto& axis : axes) {
    const auto& names = mesh.axis_names();
    if (std::find(names.begin(), names.end(), axis) == names.end())
      detail::throw_error(who, fmt::format("unknown mesh axis '{}'; the shard_map's mesh {} has "
                                           "axes ({})",
                                           axis, mesh.to_string(), fmt::join(names, ", ")));
  }
  return mesh.comm(axes);
}
}  // namespace

at::Tensor psum(const at::Tensor& x, const std::vector<std::string>& axes) {
  return detail::all_reduce_ad(x, axis_comm(axes, "psum"));
}

at::Tensor psum(const at::Tensor& x, const std::string& axis) {
  return psum(x, std::vector<std::string>{axis});
}

at::Tensor pmean(const at::Tensor& x, const std::string& axis) {
  return psum(x, axis) / static_cast<double>(axis_size(axis));
}

at::Tensor pmax(const at::Tensor& x, const std::string& axis) {
  at::Tensor out = x.detach().clone();
  axis_comm({axis}, "pmax").all_reduce_(out, ReduceOp::max);
  return out;
}

namespace {
// `dim` (negative: from the end) of a tensor of `dims` dims, or an error naming `op`.
int64_t checked_dim(int64_t dim, int64_t dims, const char* op) {
  const int64_t d = dim < 0 ? dim + dims : dim;
  NNX_CHECK(d >= 0 && d < dims, "{}: dim {} lies outside a tensor of {} dims", op, dim, dims);
  return d;
}
}  // namespace

at::Tensor all_gather(const at::Tensor& x, const std::string& axis, int64_t dim, bool tiled) {
  const auto& comm = axis_comm({axis}, "all_gather");
  if (tiled) return detail::all_gather_ad(x, comm, checked_dim(dim, x.dim(), "all_gather"));
  const int64_t d = checked_dim(dim, x.dim() + 1, "all_gather");  // the new dim's place
  return detail::all_gather_ad(x.unsqueeze(d), comm, d);
}

at::Tensor psum_scatter(const at::Tensor& x, const std::string& axis, int64_t dim, bool tiled) {
  const auto& comm = axis_comm({axis}, "psum_scatter");
  const int64_t d = checked_dim(dim, x.dim(), "psum_scatter");
  if (tiled) return detail::reduce_scatter_ad(x, comm, d);
  NNX_CHECK(x.size(d) == comm.size(),
            "untiled psum_scatter needs dim {} of size {} (the axis size), got {}; pass "
            "tiled=true to split it instead",
            d, comm.size(), x.size(d));
  return detail::reduce_scatter_ad(x, comm, d).squeeze(d);
}

at::Tensor ppermute(const at::Tensor& x, const std::string& axis,
                    const std::vector<std::pair<int, int>>& perm) {
  return detail::permute_ad(x, axis_comm({axis}, "ppermute"), perm);
}

at::Tensor all_to_all(const at::Tensor& x, const std::string& axis, int64_t split_dim,
                      int64_t concat_dim) {
  return detail::all_to_all_ad(x, axis_comm({axis}, "all_to_all"), split_dim, concat_dim);
}

int64_t axis_index(const std::string& axis) {
  return detail::current_shard_map_mesh("axis_index").coordinate(axis);
}

int64_t axis_size(const std::string& axis) {
  return detail::current_shard_map_mesh("axis_size").axis_size(axis);
}

random::Key fold_in_axis(const random::Key& key, const std::string& axis) {
  return random::fold_in(key, static_cast<uint32_t>(axis_index(axis)));
}

}  // namespace nnx
