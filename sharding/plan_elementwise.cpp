// The elementwise planner (tables "add", "mul", "div" in op_rules.cpp): each output dim takes the
// axes of the first operand that spans it unbroadcast; operands take the output's layout on the
// dims they span; pending sums survive where the op is linear in that operand.
#include <nnx/core/error.h>
#include <nnx/sharding/op_plan.h>
#include <nnx/sharding/detail/plan_rows.h>

#include <algorithm>

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

}  // namespace

OpPlan plan_elementwise(std::string op, const Layout& a, const Layout& b, Linearity linearity) {
  const size_t n = std::max(a.shape.size(), b.shape.size());
  Shape shape(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.shape.size() ? 1 : a.shape[i - (n - a.shape.size())];
    int64_t db = i < n - b.shape.size() ? 1 : b.shape[i - (n - b.shape.size())];
    NNX_CHECK(da == db || da == 1 || db == 1, "shapes {} and {} do not broadcast (dim {}: {} vs {})",
              to_string(a.shape), to_string(b.shape), i, da, db);
    shape[i] = std::max(da, db);
  }
  std::vector<Axes> out(n);
  Axes used;
  for (const Layout* x : {&a, &b}) {
    const size_t offset = n - x->shape.size();
    for (size_t i = 0; i < x->dims.size(); ++i) {
      auto& slot = out[offset + i];
      if (!slot.empty() || x->shape[i] != shape[offset + i]) continue;
      bool free = true;
      for (const auto& axis : x->dims[i]) free &= !contains(used, axis);
      if (!free) continue;
      slot = x->dims[i];
      used.insert(used.end(), slot.begin(), slot.end());
    }
  }
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
  auto roles = [&](size_t rank) {
    std::vector<detail::DimRole> r;
    for (size_t d = 0; d < rank; ++d) r.push_back({"i", static_cast<int64_t>(d + n - rank)});
    return r;
  };
  detail::finish_plan(plan, rule_table(table_of(linearity)),
                      {roles(a.shape.size()), roles(b.shape.size())}, roles(n));
  return plan;
}

}  // namespace nnx
