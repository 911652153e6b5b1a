// Shapes and index boxes: a Box is a block [start, start + size) of a larger array, the unit
// in which samplers and initializers produce values (a rank's local shard is a Box).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nnx {

using Shape = std::vector<int64_t>;

struct Box {
  Shape start;  // first global index per dim
  Shape size;   // extent per dim

  // The box covering a whole array of this shape.
  static Box whole(const Shape& shape);
  int64_t numel() const;
  bool operator==(const Box&) const = default;
};

int64_t numel(const Shape& shape);
std::string to_string(const Shape& shape);  // "(2, 3)"

// dim in [-ndim, ndim) as an index in [0, ndim); otherwise an error from `who`.
int64_t normalize_dim(int64_t dim, int64_t ndim, const char* who);

// Throws unless box lies inside shape (same rank, 0 <= start, start + size <= dim).
void check_box_inside(const Box& box, const Shape& shape, const char* who);

}  // namespace nnx
