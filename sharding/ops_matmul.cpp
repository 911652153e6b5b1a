// Contractions. Rule (per mesh axis, OneFlow/DTensor style): S(m)·R -> S(m), R·S(n) -> S(n),
// S(k)·S(k) -> Partial, R·R -> R; batch dims follow a. A contraction dim split on one side only
// is sliced on the other (no communication); conflicting axes are gathered on b.
#include <nnx/core/error.h>
#include <nnx/sharding/ops.h>
#include <nnx/sharding/detail/ops_common.h>

#include <torch/torch.h>

namespace nnx {

using namespace detail;

Array matmul(const Array& a0, const Array& b0) {
  NNX_CHECK(a0.ndim() >= 2 && b0.ndim() >= 2,
            "needs arrays of rank >= 2, got {} and {}", shape_str(a0), shape_str(b0));
  const int64_t k = a0.shape().back();
  NNX_CHECK(b0.shape()[b0.ndim() - 2] == k,
            "inner dims differ: {} @ {} ({} vs {})", shape_str(a0), shape_str(b0), k,
            b0.shape()[b0.ndim() - 2]);
  auto mesh = common_mesh({&a0, &b0}, "matmul");
  // Output shape: broadcast batch dims, then m, n.
  const int64_t batch_a = a0.ndim() - 2, batch_b = b0.ndim() - 2;
  const int64_t batch = std::max(batch_a, batch_b);
  Shape shape(batch);
  for (int64_t i = 0; i < batch; ++i) {
    int64_t da = i < batch - batch_a ? 1 : a0.shape()[i - (batch - batch_a)];
    int64_t db = i < batch - batch_b ? 1 : b0.shape()[i - (batch - batch_b)];
    NNX_CHECK(da == db || da == 1 || db == 1, "batch dims of {} and {} do not broadcast",
              shape_str(a0), shape_str(b0));
    shape[i] = std::max(da, db);
  }
  shape.push_back(a0.shape()[a0.ndim() - 2]);
  shape.push_back(b0.shape().back());
  if (!mesh) return Array(torch::matmul(a0.local(), b0.local()));
  if (all_replicated({&a0, &b0}))
    return replicated_result(torch::matmul(a0.local(), b0.local()), std::move(shape), mesh);

  Array a = on_mesh(a0, mesh), b = on_mesh(b0, mesh);
  const DimAxes A = dims_of(a), B = dims_of(b);
  DimAxes out(shape.size());
  Axes used = a.partial_axes();
  auto take = [&](const Axes& axes) {
    Axes free = without(axes, used);
    used.insert(used.end(), free.begin(), free.end());
    return free;
  };
  // Batch dims from a where it spans them, else from b.
  for (int64_t i = 0; i < batch; ++i) {
    int64_t ia = i - (batch - batch_a);
    if (ia >= 0 && a.shape()[ia] == shape[i]) out[i] = take(A[ia]);
  }
  const Axes m_axes = take(A[a.ndim() - 2]);
  Axes k_axes = take(A[a.ndim() - 1]);
  for (int64_t i = 0; i < batch; ++i) {
    int64_t ib = i - (batch - batch_b);
    if (out[i].empty() && ib >= 0 && b.shape()[ib] == shape[i]) out[i] = take(B[ib]);
  }
  if (k_axes.empty()) k_axes = take(B[b.ndim() - 2]);
  const Axes n_axes = take(B[b.ndim() - 1]);
  out[batch] = m_axes;
  out[batch + 1] = n_axes;

  // Targets: a spans its batch dims as the output does, b likewise; k split the same way.
  DimAxes ta(a.ndim()), tb(b.ndim());
  for (int64_t i = 0; i < batch; ++i) {
    int64_t ia = i - (batch - batch_a), ib = i - (batch - batch_b);
    if (ia >= 0 && a.shape()[ia] == shape[i]) ta[ia] = out[i];
    if (ib >= 0 && b.shape()[ib] == shape[i]) tb[ib] = out[i];
  }
  ta[a.ndim() - 2] = m_axes;
  ta[a.ndim() - 1] = k_axes;
  tb[b.ndim() - 2] = k_axes;
  tb[b.ndim() - 1] = n_axes;
  // b may stay pending along axes a is replicated on and nothing else uses.
  const Axes partial_b = without(b.partial_axes(), used);
  Array la = relayout(a, ta, a.partial_axes());
  Array lb = relayout(b, tb, partial_b);
  Axes partial = a.partial_axes();
  partial.insert(partial.end(), partial_b.begin(), partial_b.end());
  partial.insert(partial.end(), k_axes.begin(), k_axes.end());
  return make_result(torch::matmul(la.local(), lb.local()), shape, mesh, out, partial);
}

Array linear(const Array& x, const Array& weight, const std::optional<Array>& bias) {
  Array y = matmul(x, weight);
  return bias ? add(y, *bias) : y;
}

}  // namespace nnx
