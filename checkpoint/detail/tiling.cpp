// Overlap search: an O(n^2) pairwise check, and a grid of the distinct block boundaries per dim
// where each block marks the cells it covers (O(cells + n log n)).
#include <nnx/checkpoint/detail/tiling.h>

#include <algorithm>

namespace nnx::checkpoint::detail {
namespace {

using Overlap = std::optional<std::pair<size_t, size_t>>;

bool is_empty(const Block& b) {
  return std::find(b.shape->begin(), b.shape->end(), 0) != b.shape->end();
}

bool contains(const Block& b, const std::vector<int64_t>& point) {
  for (size_t d = 0; d < point.size(); ++d)
    if (point[d] < (*b.start)[d] || point[d] >= (*b.start)[d] + (*b.shape)[d]) return false;
  return true;
}

bool blocks_overlap(const Block& a, const Block& b) {
  for (size_t d = 0; d < a.start->size(); ++d) {
    int64_t lo = std::max((*a.start)[d], (*b.start)[d]);
    int64_t hi = std::min((*a.start)[d] + (*a.shape)[d], (*b.start)[d] + (*b.shape)[d]);
    if (lo >= hi) return false;
  }
  return true;
}

Overlap pairwise(const std::vector<Block>& blocks) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (is_empty(blocks[i])) continue;
    for (size_t j = i + 1; j < blocks.size(); ++j)
      if (!is_empty(blocks[j]) && blocks_overlap(blocks[i], blocks[j])) return std::pair{i, j};
  }
  return std::nullopt;
}

// The distinct boundaries per dim, or nullopt when they cut more than max_cells cells.
std::optional<std::vector<std::vector<int64_t>>> grid_bounds(const std::vector<Block>& blocks,
                                                             size_t rank, uint64_t max_cells) {
  std::vector<std::vector<int64_t>> bounds(rank);
  uint64_t cells = 1;
  for (size_t d = 0; d < rank; ++d) {
    for (const auto& b : blocks)
      if (!is_empty(b)) {
        bounds[d].push_back((*b.start)[d]);
        bounds[d].push_back((*b.start)[d] + (*b.shape)[d]);
      }
    std::sort(bounds[d].begin(), bounds[d].end());
    bounds[d].erase(std::unique(bounds[d].begin(), bounds[d].end()), bounds[d].end());
    cells *= bounds[d].size() - 1;
    if (cells > max_cells) return std::nullopt;
  }
  return bounds;
}

Overlap grid(const std::vector<Block>& blocks, const std::vector<std::vector<int64_t>>& bounds) {
  const size_t rank = bounds.size();
  std::vector<uint64_t> stride(rank, 1);
  for (size_t d = rank; d-- > 1;) stride[d - 1] = stride[d] * (bounds[d].size() - 1);
  std::vector<bool> taken(rank == 0 ? 1 : stride[0] * (bounds[0].size() - 1));
  std::vector<size_t> lo(rank), hi(rank), at(rank);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Block& b = blocks[i];
    if (is_empty(b)) continue;
    for (size_t d = 0; d < rank; ++d) {
      const auto& bd = bounds[d];
      lo[d] = std::lower_bound(bd.begin(), bd.end(), (*b.start)[d]) - bd.begin();
      hi[d] = std::lower_bound(bd.begin(), bd.end(), (*b.start)[d] + (*b.shape)[d]) - bd.begin();
    }
    at = lo;
    for (bool more = true; more;) {  // every cell of the block, row-major
      uint64_t cell = 0;
      for (size_t d = 0; d < rank; ++d) cell += at[d] * stride[d];
      if (taken[cell]) {
        std::vector<int64_t> point(rank);
        for (size_t d = 0; d < rank; ++d) point[d] = bounds[d][at[d]];
        for (size_t j = 0; j < i; ++j)
          if (!is_empty(blocks[j]) && contains(blocks[j], point)) return std::pair{j, i};
      }
      taken[cell] = true;
      more = false;
      for (size_t d = rank; d-- > 0;) {
        if (++at[d] < hi[d]) {
          more = true;
          break;
        }
        at[d] = lo[d];
      }
    }
  }
  return std::nullopt;
}

}  // namespace

Overlap find_overlap(const std::vector<Block>& blocks, bool* too_irregular, OverlapSearch search) {
  *too_irregular = false;
  if (std::count_if(blocks.begin(), blocks.end(), [](auto& b) { return !is_empty(b); }) < 2)
    return std::nullopt;  // so the grid below has at least two boundaries per dim
  const size_t rank = blocks[0].start->size();
  if (search == OverlapSearch::pairwise ||
      (search == OverlapSearch::automatic && blocks.size() <= 64))
    return pairwise(blocks);
  const uint64_t max_cells = search == OverlapSearch::grid
                                 ? kGridMaxCells
                                 : std::min(kGridMaxCells, kGridCellsPerBlock * blocks.size());
  if (auto bounds = grid_bounds(blocks, rank, max_cells)) return grid(blocks, *bounds);
  if (search == OverlapSearch::automatic && blocks.size() <= kPairwiseMaxBlocks)
    return pairwise(blocks);
  *too_irregular = true;
  return std::nullopt;
}

}  // namespace nnx::checkpoint::detail
