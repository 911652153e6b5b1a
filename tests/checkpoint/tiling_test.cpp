// The overlap search behind manifest chunk checks: the pairwise and grid searches agree, and
// large layouts stay bounded.
#include "../catch_after_torch.h"

#include <nnx/checkpoint/detail/tiling.h>

#include <random>

using namespace nnx::checkpoint::detail;

namespace {

struct Layout {
  std::vector<std::vector<int64_t>> starts, shapes;
  std::vector<Block> blocks() const {
    std::vector<Block> out;
    for (size_t i = 0; i < starts.size(); ++i) out.push_back({&starts[i], &shapes[i]});
    return out;
  }
  void add(std::vector<int64_t> start, std::vector<int64_t> shape) {
    starts.push_back(std::move(start));
    shapes.push_back(std::move(shape));
  }
};

std::optional<std::pair<size_t, size_t>> search(const Layout& l, OverlapSearch how) {
  bool too_irregular = true;
  auto found = find_overlap(l.blocks(), &too_irregular, how);
  REQUIRE_FALSE(too_irregular);
  return found;
}

}  // namespace

TEST_CASE("blocks overlap only when they share an element in every dim") {
  for (auto how : {OverlapSearch::pairwise, OverlapSearch::grid, OverlapSearch::automatic}) {
    Layout row_halves;
    row_halves.add({0, 0}, {2, 6});
    row_halves.add({2, 0}, {2, 6});
    CHECK_FALSE(search(row_halves, how).has_value());
    Layout corner;  // [1,3)x[1,3) against [2,4)x[2,4): share (2,2)
    corner.add({0, 0}, {1, 1});
    corner.add({1, 1}, {2, 2});
    corner.add({2, 2}, {2, 2});
    CHECK(search(corner, how) == std::pair<size_t, size_t>{1, 2});
    Layout touching_and_empty;
    touching_and_empty.add({0, 0}, {2, 2});
    touching_and_empty.add({1, 1}, {0, 5});  // empty: overlaps nothing
    touching_and_empty.add({0, 2}, {2, 2});
    CHECK_FALSE(search(touching_and_empty, how).has_value());
    Layout scalars;  // rank 0: every block is the one element
    scalars.add({}, {});
    scalars.add({}, {});
    CHECK(search(scalars, how) == std::pair<size_t, size_t>{0, 1});
  }
}

TEST_CASE("pairwise and grid overlap searches agree on random layouts") {
  std::mt19937 gen(11);
  for (int trial = 0; trial < 400; ++trial) {
    const size_t rank = 1 + gen() % 3, n = 2 + gen() % 12;
    Layout l;
    for (size_t i = 0; i < n; ++i) {
      std::vector<int64_t> start(rank), shape(rank);
      for (size_t d = 0; d < rank; ++d) {
        start[d] = gen() % 8;
        shape[d] = gen() % 4;
      }
      l.add(start, shape);
    }
    INFO("trial " << trial);
    auto p = search(l, OverlapSearch::pairwise), g = search(l, OverlapSearch::grid);
    REQUIRE(p.has_value() == g.has_value());
  }
}

TEST_CASE("a large regular grid of blocks is checked through the grid search") {
  Layout grid;  // 100 x 100 blocks of 3 x 5
  for (int64_t i = 0; i < 100; ++i)
    for (int64_t j = 0; j < 100; ++j) grid.add({3 * i, 5 * j}, {3, 5});
  CHECK_FALSE(search(grid, OverlapSearch::automatic).has_value());
  grid.add({297, 495}, {1, 1});  // the last cell again
  CHECK(search(grid, OverlapSearch::automatic) == std::pair<size_t, size_t>{9999, 10000});
}

TEST_CASE("irregular blocks are searched pairwise up to a bound, then reported") {
  Layout diagonal;  // blocks with distinct boundaries: (2n)^2 grid cells
  for (int64_t i = 0; i < 500; ++i) diagonal.add({2 * i, 2 * i}, {1, 1});
  CHECK_FALSE(search(diagonal, OverlapSearch::automatic).has_value());
  diagonal.add({998, 998}, {1, 1});
  CHECK(search(diagonal, OverlapSearch::automatic) == std::pair<size_t, size_t>{499, 500});
  for (int64_t i = 501; i < 5000; ++i) diagonal.add({2 * i, 2 * i}, {1, 1});
  bool too_irregular = false;
  CHECK_FALSE(find_overlap(diagonal.blocks(), &too_irregular).has_value());
  CHECK(too_irregular);
}
