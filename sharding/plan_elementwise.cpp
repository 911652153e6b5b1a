// The elementwise planners (tables "add", "mul", "div" and "where" in op_rules.cpp): each output
// dim takes the axes of the first operand that spans it unbroadcast; operands take the output's
// layout on the dims they span; pending sums survive where the op is linear in that operand.
#include <nnx/core/error.h>
#include <nnx/sharding/op_plan.h>
#include <nnx/sharding/detail/plan_rows.h>

#include <algorithm>
#include <initializer_list>
#include <iterator>

namespace nnx {

namespace {

// The operand's layout on its own dims for an output laid out as `out`.
std::vector<Axes> operand_dims(const Layout& x, const Shape& shape, const std::vector<Axes>& out) {
  const size_t offset = shape.size() - x.shape.size();
  std::vector<Axes> dims(x.shape.size());
  for (size_t i = 0; i < dims.size(); ++i)
    if (x.shape[i] == shape[offset + i]) dims[i] = out[offset + i];
  return dims;
}

Axes united(Axes a, const Axes& b) {
  for (const auto& axis : b)
    if (!contains(a, axis)) a.push_back(axis);
  return a;
}

Axes minus(const Axes& a, const Axes& b) {
  Axes out;
  for (const auto& axis : a)
    if (!contains(b, axis)) out.push_back(axis);
  return out;
}

const char* table_of(Linearity linearity) {
  switch (linearity) {
    case Linearity::linear: return "add";
    case Linearity::bilinear: return "mul";
    case Linearity::numerator: return "div";
  }
  return "add";
}

// The broadcast shape of the operands, each output dim laid out as the first operand that spans
// it unbroadcast (unless an earlier dim took its axes), and the axes those dims use.
struct OutputDims {
  Shape shape;
  std::vector<Axes> dims;
  Axes used;
};

// Throws, naming both shapes, unless a and b broadcast together (numpy's rule).
void check_broadcast(const Layout& a, const Layout& b) {
  const size_t n = std::max(a.shape.size(), b.shape.size());
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.shape.size() ? 1 : a.shape[i - (n - a.shape.size())];
    int64_t db = i < n - b.shape.size() ? 1 : b.shape[i - (n - b.shape.size())];
    NNX_CHECK(da == db || da == 1 || db == 1, "shapes {} and {} do not broadcast (dim {}: {} vs {})",
              to_string(a.shape), to_string(b.shape), i, da, db);
  }
}

OutputDims output_dims(std::initializer_list<const Layout*> operands) {
  // Operands that broadcast pairwise broadcast together: each dim's sizes are 1 or one size.
  for (auto a = operands.begin(); a != operands.end(); ++a)
    for (auto b = std::next(a); b != operands.end(); ++b) check_broadcast(**a, **b);
  size_t n = 0;
  for (const Layout* x : operands) n = std::max(n, x->shape.size());
  OutputDims out{Shape(n, 1), std::vector<Axes>(n), {}};
  for (const Layout* x : operands) {
    const size_t offset = n - x->shape.size();
    for (size_t i = 0; i < x->shape.size(); ++i)  // the size other than 1 (0 included)
      if (x->shape[i] != 1) out.shape[offset + i] = x->shape[i];
  }
  for (const Layout* x : operands) {
    const size_t offset = n - x->shape.size();
    for (size_t i = 0; i < x->dims.size(); ++i) {
      auto& slot = out.dims[offset + i];
      if (!slot.empty() || x->shape[i] != out.shape[offset + i]) continue;
      bool free = true;
      for (const auto& axis : x->dims[i]) free &= !contains(out.used, axis);
      if (!free) continue;
      slot = x->dims[i];
      out.used.insert(out.used.end(), slot.begin(), slot.end());
    }
  }
  return out;
}

// Each dim of a rank-`rank` operand plays role "i" of the output dim it aligns with.
std::vector<detail::DimRole> elementwise_roles(size_t rank, size_t n) {
  std::vector<detail::DimRole> r;
  for (size_t d = 0; d < rank; ++d) r.push_back({"i", static_cast<int64_t>(d + n - rank)});
  return r;
}

}  // namespace

OpPlan plan_elementwise(std::string op, const Layout& a, const Layout& b, Linearity linearity) {
  auto [shape, out, used] = output_dims({&a, &b});
  const size_t n = shape.size();
  const Axes pa = minus(a.partial, used), pb = minus(b.partial, used);
  Axes partial_a = pa, partial_b;
  switch (linearity) {
    case Linearity::linear: partial_a = united(pa, pb), partial_b = partial_a; break;
    case Linearity::bilinear: partial_b = minus(pb, pa); break;
    case Linearity::numerator: break;
  }
  Layout ta{a.shape, operand_dims(a, shape, out), partial_a};
  Layout tb{b.shape, operand_dims(b, shape, out), partial_b};
  Axes partial = united(partial_a, partial_b);
  OpPlan plan{std::move(op), {a, b}, {std::move(ta), std::move(tb)}, {},
              Layout{shape, std::move(out), std::move(partial)}, {}};
  detail::finish_plan(plan, rule_table(table_of(linearity)),
                      {elementwise_roles(a.shape.size(), n), elementwise_roles(b.shape.size(), n)},
                      elementwise_roles(n, n));
  return plan;
}

OpPlan plan_where(const Layout& condition, const Layout& x, const Layout& y) {
  NNX_CHECK(condition.partial.empty(), "where's condition {} holds a pending sum; resolve it first",
            condition.to_string());
  // x's layout first, then y's: the output is laid out as the values it picks.
  auto [shape, out, used] = output_dims({&x, &y, &condition});
  const size_t n = shape.size();
  // Linear in x and y together: both pending over the same axes (a whole one is made pending).
  const Axes partial = united(minus(x.partial, used), minus(y.partial, used));
  Layout tc{condition.shape, operand_dims(condition, shape, out), {}};
  Layout tx{x.shape, operand_dims(x, shape, out), partial};
  Layout ty{y.shape, operand_dims(y, shape, out), partial};
  OpPlan plan{"where", {condition, x, y}, {std::move(tc), std::move(tx), std::move(ty)}, {},
              Layout{shape, std::move(out), partial}, {}};
  detail::finish_plan(plan, rule_table("where"),
                      {elementwise_roles(condition.shape.size(), n),
                       elementwise_roles(x.shape.size(), n), elementwise_roles(y.shape.size(), n)},
                      elementwise_roles(n, n));
  return plan;
}

}  // namespace nnx
