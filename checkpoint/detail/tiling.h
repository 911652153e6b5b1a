// Overlap search over the blocks (chunks) of one array: pairwise for few blocks, over the grid
// of block boundaries for many, so that checking a manifest costs about linear time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace nnx::checkpoint::detail {

// A block [start, start + shape) of an array; callers have checked it lies inside the array.
struct Block {
  const std::vector<int64_t>* start;
  const std::vector<int64_t>* shape;
};

enum class OverlapSearch { automatic, pairwise, grid };
constexpr size_t kPairwiseMaxBlocks = 1024;
constexpr uint64_t kGridCellsPerBlock = 64;
constexpr uint64_t kGridMaxCells = uint64_t{1} << 26;

// Indices i < j of two blocks sharing an element, or nullopt when all are disjoint. All blocks
// have the same rank. The automatic search costs O(n log n + 64 n) for blocks on a grid, or
// O(n^2) for at most kPairwiseMaxBlocks blocks; beyond both it sets *too_irregular and returns
// nullopt. The forced searches are for tests (grid: up to kGridMaxCells cells).
std::optional<std::pair<size_t, size_t>> find_overlap(
    const std::vector<Block>& blocks, bool* too_irregular,
    OverlapSearch search = OverlapSearch::automatic);

}  // namespace nnx::checkpoint::detail
