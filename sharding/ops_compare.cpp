// Comparisons, logical ops, isfinite/isnan and where, on the elementwise plans (plan_where for
// where's three operands). Pending sums resolve first (a comparison of the pieces is not one of
// their sum), except where's x and y, in which it is linear.
#include <nnx/core/error.h>
#include <nnx/sharding/astype.h>
#include <nnx/sharding/ops.h>
#include <nnx/sharding/detail/elementwise.h>

#include <torch/types.h>

#include <optional>

namespace nnx {

// Comparisons and logical ops are linear in neither operand: binary_resolved resolves pending
// sums first.
Array equal(const Array& a, const Array& b) {
  return detail::binary_resolved(a, b, "equal", [](auto& x, auto& y) { return at::eq(x, y); });
}
Array not_equal(const Array& a, const Array& b) {
  return detail::binary_resolved(a, b, "not_equal", [](auto& x, auto& y) { return at::ne(x, y); });
}
Array less(const Array& a, const Array& b) {
  return detail::binary_resolved(a, b, "less", [](auto& x, auto& y) { return at::lt(x, y); });
}
Array less_equal(const Array& a, const Array& b) {
  return detail::binary_resolved(a, b, "less_equal", [](auto& x, auto& y) { return at::le(x, y); });
}
Array greater(const Array& a, const Array& b) {
  return detail::binary_resolved(a, b, "greater", [](auto& x, auto& y) { return at::gt(x, y); });
}
Array greater_equal(const Array& a, const Array& b) {
  return detail::binary_resolved(a, b, "greater_equal",
                                 [](auto& x, auto& y) { return at::ge(x, y); });
}
Array equal(const Array& a, double b) { return equal(a, detail::scalar_like(a, b)); }
Array not_equal(const Array& a, double b) { return not_equal(a, detail::scalar_like(a, b)); }
Array less(const Array& a, double b) { return less(a, detail::scalar_like(a, b)); }
Array less_equal(const Array& a, double b) { return less_equal(a, detail::scalar_like(a, b)); }
Array greater(const Array& a, double b) { return greater(a, detail::scalar_like(a, b)); }
Array greater_equal(const Array& a, double b) {
  return greater_equal(a, detail::scalar_like(a, b));
}

Array logical_and(const Array& a, const Array& b) {
  return detail::binary_resolved(a, b, "logical_and",
                                 [](auto& x, auto& y) { return at::logical_and(x, y); });
}
Array logical_or(const Array& a, const Array& b) {
  return detail::binary_resolved(a, b, "logical_or",
                                 [](auto& x, auto& y) { return at::logical_or(x, y); });
}
Array logical_not(const Array& a) {
  return detail::unary(a, false, [](const at::Tensor& x) { return at::logical_not(x); });
}
Array isfinite(const Array& a) {
  return detail::unary(a, false, [](const at::Tensor& x) { return at::isfinite(x); });
}
Array isnan(const Array& a) {
  return detail::unary(a, false, [](const at::Tensor& x) { return at::isnan(x); });
}

Array where(const Array& condition, const Array& x, const Array& y) {
  if (const auto type = detail::zero_d_promotion(x, y))
    return where(condition, astype(x, *type), astype(y, *type));
  const Array c = condition.dtype() == at::kBool ? condition : astype(condition, at::kBool);
  auto pick = [](const at::Tensor& cv, const at::Tensor& xv, const at::Tensor& yv) {
    return at::where(cv, xv, yv);
  };
  // Pairwise broadcasting is joint broadcasting: each dim's sizes are 1 or one common size.
  detail::check_broadcast(c, x, "where");
  detail::check_broadcast(c, y, "where");
  detail::check_broadcast(x, y, "where");
  if (!c.mesh() && !x.mesh() && !y.mesh()) return Array(pick(c.local(), x.local(), y.local()));
  if (detail::laid_out_alike(x, c) && detail::laid_out_alike(x, y))  // no rule needed
    return x.with_local(pick(c.local(), x.local(), y.local()));
  const auto& mesh = detail::common_mesh({&c, &x, &y}, "where");
  if (detail::all_replicated({&c, &x, &y}))
    return detail::replicated_result(
        pick(detail::local_on_mesh(c, mesh), detail::local_on_mesh(x, mesh),
             detail::local_on_mesh(y, mesh)),
        mesh, {&c, &x, &y});
  // Any layouts: the three laid out alike where they span the output (plan_where), then one
  // LibTorch call on the blocks.
  std::optional<Array> held[3];
  const Array& lc = detail::on_mesh(c, mesh, held[0]);
  const Array& lx = detail::on_mesh(x, mesh, held[1]);
  const Array& ly = detail::on_mesh(y, mesh, held[2]);
  const detail::SharedPlan plan = detail::cached_plan("where", 0, {&lc, &lx, &ly}, [&] {
    return plan_where(detail::layout_of(lc), detail::layout_of(lx), detail::layout_of(ly));
  });
  auto label = RedistributeLabel::fallback("where");
  // One after another: each may run collectives, which every rank makes in one order.
  std::optional<at::Tensor> moved[3];
  const at::Tensor& pc = detail::planned_local(lc, *plan, 0, moved[0]);
  const at::Tensor& px = detail::planned_local(lx, *plan, 1, moved[1]);
  const at::Tensor& py = detail::planned_local(ly, *plan, 2, moved[2]);
  return detail::planned_result(pick(pc, px, py), mesh, *plan);
}
Array where(const Array& condition, const Array& x, double y) {
  return where(condition, x, detail::scalar_like(x, y));
}
Array where(const Array& condition, double x, const Array& y) {
  return where(condition, detail::scalar_like(y, x), y);
}

}  // namespace nnx
