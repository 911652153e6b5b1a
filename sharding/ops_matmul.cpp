// Contractions: checks shapes, runs plan_matmul's plan (its rule table is in op_rules.cpp).
#include <nnx/core/error.h>
#include <nnx/sharding/op_plan.h>
#include <nnx/sharding/ops.h>
#include <nnx/sharding/detail/ops_common.h>
#include <nnx/sharding/detail/plan_cache.h>

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
  const bool replicated = all_replicated({&a0, &b0});
  if (!mesh || replicated) {
    // Batch dims broadcast (the planner checks this on the sharded path).
    const int64_t batch_a = a0.ndim() - 2, batch_b = b0.ndim() - 2;
    for (int64_t i = 0; i < std::min(batch_a, batch_b); ++i) {
      int64_t da = a0.shape()[batch_a - 1 - i], db = b0.shape()[batch_b - 1 - i];
      NNX_CHECK(da == db || da == 1 || db == 1, "batch dims of {} and {} do not broadcast",
                shape_str(a0), shape_str(b0));
    }
    at::Tensor local = torch::matmul(a0.local(), b0.local());
    if (!mesh) return Array(std::move(local));
    return replicated_result(local, local.sizes().vec(), mesh);
  }
  Array a = on_mesh(a0, mesh), b = on_mesh(b0, mesh);
  const SharedPlan plan = cached_plan("matmul", 0, {&a, &b}, [&] {
    return plan_matmul(layout_of(a), layout_of(b));
  });
  Array la = planned_input(a, plan->plan, 0), lb = planned_input(b, plan->plan, 1);
  return planned_result(torch::matmul(la.local(), lb.local()), mesh, plan->plan,
                        plan->output_spec);
}

Array linear(const Array& x, const Array& weight, const std::optional<Array>& bias) {
  Array y = matmul(x, weight);
  return bias ? add(y, *bias) : y;
}

}  // namespace nnx
