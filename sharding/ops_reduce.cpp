// Reductions and softmax: sum/mean run plan_sum's plan (each rank sums its block; the axes of
// summed dims become pending sums); max, min, argmax, argmin and softmax need their dim whole.
#include <nnx/core/error.h>
#include <nnx/sharding/op_plan.h>
#include <nnx/sharding/ops.h>
#include <nnx/sharding/detail/elementwise.h>
#include <nnx/sharding/detail/ops_common.h>
#include <nnx/sharding/detail/plan_cache.h>

#include <torch/types.h>

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

}  // namespace

Array sum(const Array& a, std::vector<int64_t> dims, bool keepdim) {
  dims = reduced_dims(a, std::move(dims), "sum");
  at::Tensor local = dims.empty() ? a.local() : a.local().sum(dims, keepdim);
  if (!a.mesh()) return Array(local);
  if (all_replicated({&a})) return replicated_result(local, a.mesh(), {&a});
  // The plan's argument: a bit per summed dim, and keepdim.
  int64_t argument = keepdim ? 1 : 0;
  for (int64_t d : dims) argument |= int64_t{1} << (d + 1);
  const SharedPlan plan = a.ndim() < 62 ? cached_plan("sum", argument, {&a}, [&] {
    return plan_sum(layout_of(a), dims, keepdim);
  }) : nullptr;
  if (!plan) {
    const Layout out = plan_sum(layout_of(a), dims, keepdim).output;
    return make_result(local, out.shape, a.mesh(), out.dims, out.partial);
  }
  return planned_result(local, a.mesh(), *plan);
}

Array mean(const Array& a, std::vector<int64_t> dims, bool keepdim) {
  dims = reduced_dims(a, std::move(dims), "mean");
  int64_t count = 1;
  for (auto d : dims) count *= a.shape()[d];
  NNX_CHECK(count > 0, "over {} elements of an array of shape {}", count, shape_str(a));
  return mul(sum(a, dims, keepdim), 1.0 / static_cast<double>(count));
}

namespace {

// fn(block, dim) reduces `dim` of a's block once the dim is whole (gathered where split).
template <class Fn>
Array reduce_whole_dim(const Array& a, int64_t dim, bool keepdim, const char* op, Fn fn) {
  dim = normalize_dim(dim, a.ndim(), op);
  Array x = whole_dim(a, dim);
  at::Tensor local = fn(x.local(), dim);
  if (!x.mesh()) return Array(local);
  // Laid out as a sum over the (now whole) dim would be: no pending sum arises.
  const Layout out = plan_sum(layout_of(x), {dim}, keepdim).output;
  return make_result(local, out.shape, x.mesh(), out.dims, out.partial);
}

// argmax and argmin of bools as of 0 and 1 (LibTorch refuses bool there).
at::Tensor bools_as_bytes(const at::Tensor& x) {
  return x.scalar_type() == at::kBool ? x.to(at::kByte) : x;
}

}  // namespace

// amax and amin split the gradient evenly among tied values, as JAX's max and min do.
Array max(const Array& a, int64_t dim, bool keepdim) {
  return reduce_whole_dim(a, dim, keepdim, "max", [keepdim](const at::Tensor& x, int64_t d) {
    return x.amax(d, keepdim);
  });
}
Array min(const Array& a, int64_t dim, bool keepdim) {
  return reduce_whole_dim(a, dim, keepdim, "min", [keepdim](const at::Tensor& x, int64_t d) {
    return x.amin(d, keepdim);
  });
}
Array argmax(const Array& a, int64_t dim, bool keepdim) {
  return reduce_whole_dim(a, dim, keepdim, "argmax", [keepdim](const at::Tensor& x, int64_t d) {
    return bools_as_bytes(x).argmax(d, keepdim);
  });
}
Array argmin(const Array& a, int64_t dim, bool keepdim) {
  return reduce_whole_dim(a, dim, keepdim, "argmin", [keepdim](const at::Tensor& x, int64_t d) {
    return bools_as_bytes(x).argmin(d, keepdim);
  });
}

// Integers and bools in float32 (LibTorch's default float), as JAX without 64-bit types.
Array softmax(const Array& a, int64_t dim) {
  dim = normalize_dim(dim, a.ndim(), "softmax");
  Array x = whole_dim(a, dim);
  return x.with_local(as_floating(x.local()).softmax(dim));
}

Array log_softmax(const Array& a, int64_t dim) {
  dim = normalize_dim(dim, a.ndim(), "log_softmax");
  Array x = whole_dim(a, dim);
  return x.with_local(as_floating(x.local()).log_softmax(dim));
}

}  // namespace nnx
