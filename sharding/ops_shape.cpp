// Shape ops. Rule for reshape: a split dim keeps its axes when it leads its group of merged or
// split dims, size-1 dims aside (its blocks stay contiguous); other split dims are gathered
// first, counted as a fallback. transpose permutes the layout; concatenate needs its dim whole.
#include <nnx/core/error.h>
#include <nnx/sharding/ops.h>
#include <nnx/sharding/detail/ops_common.h>
#include <nnx/sharding/redistribute.h>

#include <torch/types.h>

namespace nnx {

using namespace detail;

namespace {

int64_t ways(const Mesh& mesh, const Axes& axes) {
  int64_t n = 1;
  for (const auto& a : axes) n *= mesh.axis_size(a);
  return n;
}

// The first dim in [begin, end) of `shape` whose size is not 1, or that is split (`axes`, when
// given: over a mesh axis of size 1); begin if none is.
size_t leading_dim(const Shape& shape, size_t begin, size_t end, const DimAxes* axes = nullptr) {
  for (size_t d = begin; d < end; ++d)
    if (shape[d] != 1 || (axes != nullptr && !(*axes)[d].empty())) return d;
  return begin;
}

}  // namespace

Array reshape(const Array& a, Shape shape) {
  // Resolve one -1.
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      NNX_CHECK(infer < 0, "more than one -1 in {}", to_string(shape));
      infer = static_cast<int64_t>(i);
    } else {
      NNX_CHECK(shape[i] >= 0, "cannot reshape {} to {}: sizes are >= 0, or one -1 to infer",
                shape_str(a), to_string(shape));
      known *= shape[i];
    }
  }
  // With a 0 among the known sizes, -1 is ambiguous (NumPy refuses it too).
  NNX_CHECK(infer < 0 || known > 0, "cannot reshape {} to {}: the -1 cannot be inferred next "
            "to a size 0", shape_str(a), to_string(shape));
  if (infer >= 0) shape[infer] = a.numel() / known;
  NNX_CHECK(numel(shape) == a.numel(), "cannot reshape {} ({} elements) to {}",
            shape_str(a), a.numel(), to_string(shape));
  if (!a.mesh()) return Array(a.local().reshape(shape));
  if (a.numel() == 0) {
    // No elements: any layout holds them, and the groups below need nonzero sizes.
    const Array whole = relayout(a, DimAxes(a.shape().size()), {});
    return make_result(whole.local().reshape(shape), shape, a.mesh(), DimAxes(shape.size()), {});
  }

  // Groups: runs of input dims and output dims with equal products.
  const auto in = dims_of(a);
  DimAxes keep = in, out(shape.size());
  size_t i = 0, o = 0;
  while (i < a.shape().size() || o < shape.size()) {
    size_t i0 = i, o0 = o;
    int64_t pi = i < a.shape().size() ? a.shape()[i++] : 1;
    int64_t po = o < shape.size() ? shape[o++] : 1;
    while (pi != po) {
      if (pi < po) pi *= a.shape()[i++];
      else po *= shape[o++];
    }
    // The leading input dim's axes move to the leading output dim when its blocks stay whole;
    // size-1 dims lead nothing ([k] -> [1, k] keeps k's split).
    const size_t lead_in = leading_dim(a.shape(), i0, i, &in);
    const size_t lead_out = leading_dim(shape, o0, o);
    for (size_t d = i0; d < i; ++d)
      if (d != lead_in) keep[d].clear();
    if (i0 < i && o0 < o && !in[lead_in].empty()) {
      // The block is a contiguous run of the group, a block of the leading output dim when
      // that dim splits as many ways.
      if (shape[lead_out] % ways(*a.mesh(), in[lead_in]) == 0) out[lead_out] = in[lead_in];
      else keep[lead_in].clear();
    }
  }
  Array x = a;
  if (keep != in) {
    ++fallback_count();
    x = relayout(a, keep, a.partial_axes());
  }
  Shape local_shape = shape;
  for (size_t d = 0; d < shape.size(); ++d) local_shape[d] /= ways(*a.mesh(), out[d]);
  return make_result(x.local().reshape(local_shape), shape, a.mesh(), out, x.partial_axes());
}

Array flatten(const Array& a, int64_t start_dim, int64_t end_dim) {
  if (a.ndim() == 0) return reshape(a, {1});
  start_dim = normalize_dim(start_dim, a.ndim(), "flatten");
  end_dim = normalize_dim(end_dim, a.ndim(), "flatten");
  Shape shape;
  for (int64_t d = 0; d < start_dim; ++d) shape.push_back(a.shape()[d]);
  int64_t merged = 1;
  for (int64_t d = start_dim; d <= end_dim; ++d) merged *= a.shape()[d];
  shape.push_back(merged);
  for (int64_t d = end_dim + 1; d < a.ndim(); ++d) shape.push_back(a.shape()[d]);
  return reshape(a, shape);
}

Array transpose(const Array& a, int64_t dim0, int64_t dim1) {
  dim0 = normalize_dim(dim0, a.ndim(), "transpose");
  dim1 = normalize_dim(dim1, a.ndim(), "transpose");
  at::Tensor local = a.local().transpose(dim0, dim1);
  if (!a.mesh()) return Array(local);
  auto dims = dims_of(a);
  std::swap(dims[dim0], dims[dim1]);
  Shape shape = a.shape();
  std::swap(shape[dim0], shape[dim1]);
  return make_result(local, shape, a.mesh(), dims, a.partial_axes());
}

Array concatenate(const std::vector<Array>& arrays, int64_t dim) {
  NNX_CHECK(!arrays.empty(), "needs at least one array");
  std::vector<const Array*> ptrs;
  for (const auto& a : arrays) ptrs.push_back(&a);
  auto mesh = common_mesh(ptrs, "concatenate");
  const int64_t rank = arrays[0].ndim();
  dim = normalize_dim(dim, rank, "concatenate");
  Shape shape = arrays[0].shape();
  shape[dim] = 0;
  for (const auto& a : arrays) {
    NNX_CHECK(a.ndim() == rank, "ranks differ: {} and {}", shape_str(arrays[0]),
              shape_str(a));
    for (int64_t d = 0; d < rank; ++d)
      NNX_CHECK(d == dim || a.shape()[d] == arrays[0].shape()[d],
                "shapes {} and {} differ outside dim {}", shape_str(arrays[0]),
                shape_str(a), dim);
    shape[dim] += a.shape()[dim];
  }
  std::vector<at::Tensor> locals;
  if (!mesh) {
    for (const auto& a : arrays) locals.push_back(a.local());
    return Array(torch::cat(locals, dim));
  }
  auto dims = dims_of(on_mesh(arrays[0], mesh));
  dims[dim].clear();
  for (const auto& a : arrays)  // a sharded dim to join is gathered whole
    if (a.mesh() && !dims_of(a)[dim].empty()) {
      ++fallback_count();
      break;
    }
  Axes partial;
  for (const auto& a : arrays)
    for (const auto& p : without(on_mesh(a, mesh).partial_axes(), used_axes(dims)))
      if (!contains(partial, p)) partial.push_back(p);
  for (const auto& a : arrays) locals.push_back(relayout(on_mesh(a, mesh), dims, partial).local());
  return make_result(torch::cat(locals, dim), shape, mesh, dims, partial);
}

Array with_sharding_constraint(const Array& x, const PartitionSpec& spec,
                               std::source_location where) {
  NNX_CHECK(x.mesh() != nullptr,
            "the array is on no mesh; place it with device_put");
  auto label = RedistributeLabel::fallback("with_sharding_constraint");
  return redistribute(x, spec, {}, where);
}

}  // namespace nnx
