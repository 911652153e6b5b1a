// Layouts and planned ops as data (see op_plan.h), and the row check every planner ends with.
#include <nnx/core/error.h>
#include <nnx/sharding/op_plan.h>
#include <nnx/sharding/spec_check.h>
#include <nnx/sharding/detail/plan_rows.h>

#include <fmt/format.h>

#include <algorithm>

namespace nnx {

Layout Layout::of(Shape shape, const PartitionSpec& spec, Axes partial) {
  NNX_CHECK(spec.size() <= shape.size(), "{} has more entries than shape {} has dims",
            spec.to_string(), nnx::to_string(shape));
  Layout out{std::move(shape), {}, std::move(partial)};
  const PartitionSpec padded = pad_spec(spec, out.shape.size());
  for (const auto& e : padded.entries()) out.dims.push_back(e.names());
  return out;
}

PartitionSpec Layout::spec() const {
  std::vector<SpecEntry> entries;
  for (const auto& d : dims) entries.emplace_back(d);
  return PartitionSpec(std::move(entries));
}

std::string Layout::to_string() const {
  std::string out = nnx::to_string(shape) + " " + spec().to_string();
  if (!partial.empty()) out += fmt::format(" + pending sum over ({})", fmt::join(partial, ", "));
  return out;
}

bool OpPlan::communicates() const {
  for (const auto& s : steps)
    for (const auto& step : s.steps)
      if (step.communicates()) return true;
  return false;
}

std::string OpPlan::to_string() const {
  std::string out = op + ":";
  for (size_t i = 0; i < inputs.size(); ++i)
    out += fmt::format("\n  input {}: {}", i, steps[i].to_string());
  out += "\n  output: " + output.to_string();
  for (const auto& [axis, row] : rows) out += fmt::format("\n  axis '{}': {}", axis, row.to_string());
  return out;
}

int64_t plan_bytes_per_rank(const OpPlan& plan, const std::map<std::string, int64_t>& axis_sizes,
                            int64_t itemsize) {
  int64_t bytes = 0;
  for (size_t i = 0; i < plan.steps.size(); ++i)
    bytes += plan_bytes_per_rank(plan.steps[i], plan.inputs[i].shape, axis_sizes, itemsize);
  return bytes;
}

namespace detail {

namespace {

struct Placement {
  std::string name;  // "R", "P", "S(m)"
  int64_t out_dim = -1;
};

Placement placement(const Layout& layout, const std::vector<DimRole>& roles,
                    const std::string& axis) {
  if (contains(layout.partial, axis)) return {"P"};
  for (size_t d = 0; d < layout.dims.size(); ++d)
    if (contains(layout.dims[d], axis))
      return {fmt::format("S({})", roles.at(d).name), roles.at(d).out_dim};
  return {"R"};
}

// Whether `row` names these placements, every split one mapping to the same output dim.
bool fits(const RuleRow& row, const std::vector<Placement>& in, const Placement& out) {
  if (row.output != out.name) return false;
  int64_t out_dim = out.out_dim;
  for (size_t i = 0; i < in.size(); ++i) {
    if (row.inputs[i] != in[i].name) return false;
    if (in[i].out_dim < 0) continue;
    if (out_dim >= 0 && out_dim != in[i].out_dim) return false;
    out_dim = in[i].out_dim;
  }
  return true;
}

}  // namespace

void finish_plan(OpPlan& plan, const OpRule& rule,
                 const std::vector<std::vector<DimRole>>& target_roles,
                 const std::vector<DimRole>& output_roles) {
  plan.steps.clear();
  for (size_t i = 0; i < plan.inputs.size(); ++i) {
    const Layout &from = plan.inputs[i], &to = plan.targets[i];
    plan.steps.push_back(plan_redistribute(from.spec(), from.partial, to.spec(), to.partial,
                                           from.shape.size()));
  }
  // Every axis any layout names, in order of first appearance.
  Axes axes;
  auto note = [&](const Layout& l) {
    for (const auto& d : l.dims)
      for (const auto& axis : d)
        if (!contains(axes, axis)) axes.push_back(axis);
    for (const auto& axis : l.partial)
      if (!contains(axes, axis)) axes.push_back(axis);
  };
  for (const auto& l : plan.inputs) note(l);
  for (const auto& l : plan.targets) note(l);
  note(plan.output);
  plan.rows.clear();
  for (const auto& axis : axes) {
    std::vector<Placement> in;
    for (size_t i = 0; i < plan.targets.size(); ++i)
      in.push_back(placement(plan.targets[i], target_roles[i], axis));
    const Placement out = placement(plan.output, output_roles, axis);
    auto row = std::find_if(rule.rows.begin(), rule.rows.end(),
                            [&](const RuleRow& r) { return fits(r, in, out); });
    if (row == rule.rows.end()) {
      std::vector<std::string> names;
      for (const auto& p : in) names.push_back(p.name);
      NNX_FAIL("{}'s plan places axis '{}' as {} -> {}, which no row of its table accepts "
               "(an nnx bug; please report it with this plan:\n{})",
               plan.op, axis, fmt::join(names, " · "), out.name, plan.to_string());
    }
    plan.rows.emplace_back(axis, *row);
  }
}

}  // namespace detail

}  // namespace nnx
