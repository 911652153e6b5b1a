// Shape and Box helpers.
#include <nnx/core/error.h>
#include <nnx/core/shape.h>

namespace nnx {

Box Box::whole(const Shape& shape) { return Box{Shape(shape.size(), 0), shape}; }

int64_t Box::numel() const { return nnx::numel(size); }

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string to_string(const Shape& shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  return fmt::format("({})", fmt::join(shape, ", "));
}

void check_box_inside(const Box& box, const Shape& shape, const char* who) {
  bool ok = box.start.size() == shape.size() && box.size.size() == shape.size();
  for (size_t d = 0; ok && d < shape.size(); ++d)
    ok = box.start[d] >= 0 && box.size[d] >= 0 && box.start[d] + box.size[d] <= shape[d];
  if (!ok)
    detail::throw_error(who, fmt::format("block start {} size {} does not lie inside shape {}",
                                         to_string(box.start), to_string(box.size),
                                         to_string(shape)));
}

int64_t normalize_dim(int64_t dim, int64_t ndim, const char* who) {
  const int64_t d = dim < 0 ? dim + ndim : dim;
  if (d < 0 || d >= ndim)
    detail::throw_error(who,
                        fmt::format("dim {} is out of range for an array of rank {}", dim, ndim));
  return d;
}

}  // namespace nnx
