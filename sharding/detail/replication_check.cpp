// Comparing shard_map outputs across the axes their out specs leave out.
#include <nnx/core/error.h>
#include <nnx/sharding/detail/hash_mix.h>
#include <nnx/sharding/detail/rank_shapes.h>
#include <nnx/sharding/detail/replication_check.h>
#include <nnx/sharding/mesh.h>

#include <torch/types.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace nnx::detail {

namespace {

// A hash of the value's bytes; floating values first add 0, which makes -0.0 into 0.0.
int64_t value_hash(const at::Tensor& local) {
  at::Tensor t = local.detach();
  if (t.is_floating_point() || t.is_complex()) t = t + 0;
  t = t.contiguous().to(at::kCPU);
  const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
  const size_t n = t.nbytes();
  uint64_t h = kHashSeed;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes + i, 8);
    h = hash_mix(h, word);
  }
  for (; i < n; ++i) h = hash_mix(h, bytes[i]);
  return static_cast<int64_t>(h);
}

// The rank that holds the same block as `rank`: coordinate 0 along every axis in `left_out`.
int64_t first_holder(const Mesh& mesh, int64_t rank, const std::vector<std::string>& left_out) {
  std::vector<int64_t> coordinates = mesh.coordinates_of(rank);
  for (const auto& axis : left_out) coordinates[mesh.axis_index(axis)] = 0;
  return mesh.rank_of(coordinates);
}

}  // namespace

void check_shard_map_output(const Mesh& mesh, const at::Tensor& local, const PartitionSpec& spec,
                            size_t index) {
  if (mesh.size() == 1) return;
  const std::string op = fmt::format("shard_map output {}", index);
  check_same_on_every_rank(mesh, local,
                           {op.c_str(), "outputs", "the body must return the same shape on every "
                                                   "process"});
  const std::vector<std::string> named = spec.axis_names();
  std::vector<std::string> left_out;
  for (const auto& axis : mesh.axis_names())
    if (std::find(named.begin(), named.end(), axis) == named.end()) left_out.push_back(axis);
  if (left_out.empty()) return;
  // Gathered over the whole mesh, so that every member decides alike.
  const at::Tensor hashes = mesh.comm(mesh.axis_names())
                                .all_gather(torch::full({1}, value_hash(local), torch::kInt64), 0);
  const auto h = hashes.accessor<int64_t, 1>();
  for (int64_t rank = 0; rank < mesh.size(); ++rank) {
    const int64_t holder = first_holder(mesh, rank, left_out);
    if (h[rank] == h[holder]) continue;
    throw_error(op.c_str(), fmt::format(
        "out spec {} leaves out mesh axes ({}), so the output must be equal along them, but rank "
        "{} holds a value unlike rank {}'s; reduce it over those axes in the body (psum, pmean), "
        "or name the axes it varies along in the out spec",
        spec.to_string(), fmt::join(left_out, ", "), rank, holder));
  }
}

}  // namespace nnx::detail
