// The elementwise machinery the op files share: binary ops with NumPy broadcasting over any two
// layouts (plan_elementwise), unary ops that keep their operand's layout, and scalar operands.
#pragma once

#include <nnx/sharding/array.h>
#include <nnx/sharding/astype.h>
#include <nnx/sharding/op_plan.h>
#include <nnx/sharding/redistribute.h>
#include <nnx/sharding/detail/ops_common.h>
#include <nnx/sharding/detail/plan_cache.h>

#include <optional>
#include <source_location>
#include <utility>

namespace nnx::detail {

// Throws, naming both shapes, unless a and b broadcast together (numpy's rule).
void check_broadcast(const Array& a, const Array& b, const char* op);

// fn(a, b), broadcast by LibTorch; where it refuses, the error names both shapes.
template <class Fn>
at::Tensor broadcast_by_torch(const Array& a0, const Array& b0, const char* op, Fn& fn,
                              const at::Tensor& a, const at::Tensor& b) {
  try {
    return fn(a, b);
  } catch (const c10::Error&) {
    check_broadcast(a0, b0, op);  // names the shapes when they do not broadcast
    throw;
  }
}

// Whether b lies on a's mesh in a's layout, neither holding a pending sum: an op on their blocks
// is then laid out as a (whose initializer, which with_local would drop, must be null).
inline bool laid_out_alike(const Array& a, const Array& b) {
  return a.mesh() && a.mesh() == b.mesh() && a.partial_axes().empty() &&
         b.partial_axes().empty() && !a.initializer() &&
         (a.layout() == b.layout() || (a.shape() == b.shape() && a.spec() == b.spec()));
}

// The dtype two operands meet in where exactly one is 0-d and LibTorch would rank it below the
// other (a float64 0-d array with a float32 array gives float32 there, float64 in JAX); else none.
std::optional<at::ScalarType> zero_d_promotion(const Array& a, const Array& b);

// fn(a, b) on local blocks, a0 and b0 laid out first as plan_elementwise(op, linearity) says.
template <class Fn>
Array binary(const Array& a0, const Array& b0, Linearity linearity, const char* op, Fn fn) {
  // The common case first: operands laid out alike need no rule (the result is laid out as
  // they are), so it costs what the LibTorch op costs.
  if (laid_out_alike(a0, b0)) return a0.with_local(fn(a0.local(), b0.local()));
  if (const auto type = zero_d_promotion(a0, b0))
    return binary(astype(a0, *type), astype(b0, *type), linearity, op, std::move(fn));
  if (!a0.mesh() && !b0.mesh() && a0.defined() && b0.defined()) {
    at::Tensor out = broadcast_by_torch(a0, b0, op, fn, a0.local(), b0.local());
    // Not broadcast: the result shares a0's layout.
    if (!a0.initializer() && out.sizes().equals(a0.shape())) return a0.with_local(std::move(out));
    return Array(std::move(out));
  }
  // An input is on a mesh (both on none were taken above; an empty one is an error here).
  const auto& mesh = common_mesh({&a0, &b0}, op);
  if (all_replicated({&a0, &b0}))  // no rule: LibTorch broadcasts
    return replicated_result(broadcast_by_torch(a0, b0, op, fn, local_on_mesh(a0, mesh),
                                                local_on_mesh(b0, mesh)),
                             mesh, {&a0, &b0});
  std::optional<Array> held_a, held_b;
  const Array& a = on_mesh(a0, mesh, held_a);
  const Array& b = on_mesh(b0, mesh, held_b);
  // Checked where a plan is made: a plan found was made for these shapes.
  const SharedPlan plan = cached_plan(op, static_cast<int64_t>(linearity), {&a, &b}, [&] {
    check_broadcast(a0, b0, op);
    return plan_elementwise(op, layout_of(a), layout_of(b), linearity);
  });
  auto label = RedistributeLabel::fallback(op);
  std::optional<at::Tensor> moved_a, moved_b;
  const at::Tensor& la = planned_local(a, *plan, 0, moved_a);
  const at::Tensor& lb = planned_local(b, *plan, 1, moved_b);
  return planned_result(fn(la, lb), mesh, *plan);
}

// binary for ops linear in neither operand: pending sums resolve first (operands without one
// are not copied).
template <class Fn>
Array binary_resolved(const Array& a, const Array& b, const char* op, Fn fn) {
  if (a.partial_axes().empty() && b.partial_axes().empty())
    return binary(a, b, Linearity::numerator, op, std::move(fn));
  return binary(resolved(a), resolved(b), Linearity::numerator, op, std::move(fn));
}

// A unary op; `linear` ones (x * c) keep pending sums, others resolve them first.
// `op` (the calling op, by default) labels a redistribution in NNX_LOG_REDISTRIBUTE's log.
template <class Fn>
Array unary(const Array& a, bool linear, Fn fn,
            std::source_location op = std::source_location::current()) {
  if (!linear && !a.partial_axes().empty()) return unary(resolved(a, op), true, fn, op);
  if (!a.initializer()) return a.with_local(fn(a.local()));  // laid out as its operand
  if (!a.mesh()) return Array(fn(a.local()));
  return make_result(fn(a.local()), a.shape(), a.mesh(), dims_of(a), a.partial_axes());
}

// `value` as an integer Scalar where it is a whole number, so that integer arrays stay integer
// (LibTorch and JAX promote them only for a fractional value).
at::Scalar promoting_scalar(double value);

// `value` as a 0-d operand for `a`: in a's dtype where that holds it; integer and bool arrays
// take a fractional value as floats (as LibTorch and JAX promote), not truncated.
Array scalar_like(const Array& a, double value);

// Integer and bool values as floats of the default dtype, as JAX promotes them for float-only
// functions; floating values as they are.
at::Tensor as_floating(const at::Tensor& x);

}  // namespace nnx::detail
