// Slicing and indexing along one dim, as x[start:stop:step] and x[i]. Rule: a whole dim is cut
// locally (the layout and pending sums stay); a split dim is gathered first, a counted fallback.
#include <nnx/core/error.h>
#include <nnx/sharding/ops.h>
#include <nnx/sharding/detail/ops_common.h>

#include <torch/types.h>

#include <algorithm>

namespace nnx {

using namespace detail;

namespace {

// `a` with dim d whole: as it is where d is not split.
Array with_whole_dim(const Array& a, int64_t d) {
  if (!a.mesh() || dims_of(a)[d].empty()) return a;
  return whole_dim(a, d);
}

}  // namespace

Array slice(const Array& a, int64_t dim, int64_t start, int64_t stop, int64_t step) {
  dim = normalize_dim(dim, a.ndim(), "slice");
  NNX_CHECK(step >= 1, "step must be >= 1, got {} (slicing {} along dim {})", step, shape_str(a),
            dim);
  // Python's bounds: negatives count from the end, and out-of-range ends clamp.
  const int64_t n = a.shape()[dim];
  auto bound = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  start = bound(start);
  stop = std::max(bound(stop), start);
  Array x = with_whole_dim(a, dim);
  at::Tensor local = x.local().slice(dim, start, stop, step);
  Shape shape = x.shape();
  shape[dim] = local.size(dim);
  return make_result(local, shape, x.mesh(), dims_of(x), x.partial_axes());
}

Array select(const Array& a, int64_t dim, int64_t index) {
  dim = normalize_dim(dim, a.ndim(), "select");
  const int64_t n = a.shape()[dim];
  NNX_CHECK(index >= -n && index < n, "index {} is out of range for dim {} of {} (size {})",
            index, dim, shape_str(a), n);
  Array x = with_whole_dim(a, dim);
  at::Tensor local = x.local().select(dim, index < 0 ? index + n : index);
  Shape shape = x.shape();
  shape.erase(shape.begin() + dim);
  auto dims = dims_of(x);
  dims.erase(dims.begin() + dim);
  return make_result(local, shape, x.mesh(), dims, x.partial_axes());
}

Array Array::operator[](int64_t index) const { return select(*this, 0, index); }

}  // namespace nnx
