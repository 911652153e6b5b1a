// Comparing the processes' dtypes and shapes: one row per rank, gathered over the whole mesh, so
// that every member decides alike.
#include <nnx/core/error.h>
#include <nnx/core/shape.h>
#include <nnx/sharding/array.h>
#include <nnx/sharding/detail/hash_mix.h>
#include <nnx/sharding/detail/rank_shapes.h>
#include <nnx/sharding/mesh.h>

#include <torch/types.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace nnx::detail {

namespace {

// A row: dtype, rank (number of dims), a hash of every size, and the first kShownDims sizes (for
// the message; the hash tells tensors of more dims apart).
constexpr int64_t kShownDims = 8;
constexpr int64_t kSizesAt = 3;
constexpr int64_t kRowWidth = kSizesAt + kShownDims;

at::Tensor row_of(const at::Tensor& t) {
  at::Tensor row = torch::full({kRowWidth}, -1, torch::kInt64);
  if (!t.defined()) return row;  // dtype -1: every rank learns of it, none throws alone
  auto r = row.accessor<int64_t, 1>();
  r[0] = static_cast<int64_t>(t.scalar_type());
  r[1] = t.dim();
  uint64_t h = kHashSeed;
  for (int64_t d = 0; d < t.dim(); ++d) {
    h = hash_mix(h, static_cast<uint64_t>(t.size(d)));
    if (d < kShownDims) r[kSizesAt + d] = t.size(d);
  }
  r[2] = static_cast<int64_t>(h);
  return row;
}

std::string describe(const std::vector<int64_t>& r) {
  if (r[0] < 0) return "an undefined tensor";
  Shape shown;
  for (int64_t d = 0; d < std::min(r[1], kShownDims); ++d) shown.push_back(r[kSizesAt + d]);
  std::string shape = to_string(shown);
  if (r[1] > kShownDims) shape.insert(shape.size() - 1, ", ...");
  return dtype_name(static_cast<at::ScalarType>(r[0])) + " " + shape;
}

// "rank 2" or "ranks 0, 1, 3".
std::string ranks_text(const std::vector<int64_t>& ranks) {
  return fmt::format("rank{} {}", ranks.size() > 1 ? "s" : "", fmt::join(ranks, ", "));
}

}  // namespace

void check_same_on_every_rank(const Mesh& mesh, const at::Tensor& t, const RankCheck& check) {
  if (mesh.size() == 1) return;
  const at::Tensor rows = mesh.comm(mesh.axis_names()).all_gather(row_of(t).unsqueeze(0), 0);
  if (rows.eq(rows[0]).all().item<bool>()) {
    NNX_CHECK(t.defined(), "{}: every process passed an undefined tensor", check.op);
    return;
  }
  // Ranks grouped by what they passed, in the order each first appears.
  std::map<std::vector<int64_t>, size_t> index;
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> groups;
  for (int64_t rank = 0; rank < rows.size(0); ++rank) {
    const at::Tensor row = rows[rank].contiguous();
    std::vector<int64_t> key(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + kRowWidth);
    auto [it, fresh] = index.emplace(key, groups.size());
    if (fresh) groups.emplace_back(std::move(key), std::vector<int64_t>{});
    groups[it->second].second.push_back(rank);
  }
  std::vector<std::string> parts;
  for (const auto& [key, ranks] : groups)
    parts.push_back(fmt::format("{}: {}", ranks_text(ranks), describe(key)));
  throw_error(check.op, fmt::format("the processes passed {} of different dtypes or shapes ({}); "
                                    "{}",
                                    check.what, fmt::join(parts, "; "), check.fix));
}

}  // namespace nnx::detail
