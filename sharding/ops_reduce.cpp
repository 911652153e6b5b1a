// Reductions and softmax. Rule: sum/mean reduce locally and leave a pending sum over the axes
// of the reduced dims (no communication); max and softmax need their dim whole.
#include <nnx/core/error.h>
#include <nnx/sharding/ops.h>
#include <nnx/sharding/detail/ops_common.h>

#include <torch/torch.h>

#include <algorithm>

namespace nnx {

namespace {

using namespace detail;

std::vector<int64_t> reduced_dims(const Array& a, std::vector<int64_t> dims, const char* op) {
  if (dims.empty())
    for (int64_t d = 0; d < a.ndim(); ++d) dims.push_back(d);
  for (auto& d : dims) d = normalize_dim(d, a.ndim(), op);
  std::sort(dims.begin(), dims.end());
  if (std::adjacent_find(dims.begin(), dims.end()) != dims.end())
    throw_error(op, "a dim is repeated");
  return dims;
}

// Shape and layout after reducing `dims` (kept as size 1 or dropped).
void reduce_layout(const Array& a, const std::vector<int64_t>& dims, bool keepdim, Shape& shape,
                   DimAxes& out, Axes& partial) {
  auto in = dims_of(a);
  partial = a.partial_axes();
  for (int64_t d = 0; d < a.ndim(); ++d) {
    bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (reduced) {
      partial.insert(partial.end(), in[d].begin(), in[d].end());
      if (keepdim) {
        shape.push_back(1);
        out.emplace_back();
      }
    } else {
      shape.push_back(a.shape()[d]);
      out.push_back(in[d]);
    }
  }
}

}  // namespace

Array sum(const Array& a, std::vector<int64_t> dims, bool keepdim) {
  dims = reduced_dims(a, std::move(dims), "sum");
  at::Tensor local = dims.empty() ? a.local() : a.local().sum(dims, keepdim);
  if (!a.mesh()) return Array(local);
  if (all_replicated({&a})) return replicated_result(local, local.sizes().vec(), a.mesh());
  Shape shape;
  DimAxes out;
  Axes partial;
  reduce_layout(a, dims, keepdim, shape, out, partial);
  return make_result(local, shape, a.mesh(), out, partial);
}

Array mean(const Array& a, std::vector<int64_t> dims, bool keepdim) {
  dims = reduced_dims(a, std::move(dims), "mean");
  int64_t count = 1;
  for (auto d : dims) count *= a.shape()[d];
  NNX_CHECK(count > 0, "over {} elements of an array of shape {}", count, shape_str(a));
  return mul(sum(a, dims, keepdim), 1.0 / static_cast<double>(count));
}

Array max(const Array& a, int64_t dim, bool keepdim) {
  dim = normalize_dim(dim, a.ndim(), "max");
  Array x = whole_dim(a, dim);
  at::Tensor local = std::get<0>(x.local().max(dim, keepdim));
  if (!x.mesh()) return Array(local);
  Shape shape;
  DimAxes out;
  Axes partial;
  reduce_layout(x, {dim}, keepdim, shape, out, partial);
  return make_result(local, shape, x.mesh(), out, partial);
}

Array softmax(const Array& a, int64_t dim) {
  dim = normalize_dim(dim, a.ndim(), "softmax");
  Array x = whole_dim(a, dim);
  return x.with_local(x.local().softmax(dim));
}

Array log_softmax(const Array& a, int64_t dim) {
  dim = normalize_dim(dim, a.ndim(), "log_softmax");
  Array x = whole_dim(a, dim);
  return x.with_local(x.local().log_softmax(dim));
}

}  // namespace nnx
