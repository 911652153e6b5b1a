// sum's planner (table "sum" in op_rules.cpp): each rank sums its block, no communication; the
// axes of summed dims become pending sums.
#include <nnx/core/error.h>
#include <nnx/sharding/op_plan.h>
#include <nnx/sharding/detail/plan_rows.h>

#include <algorithm>

namespace nnx {

OpPlan plan_sum(const Layout& a, const std::vector<int64_t>& dims, bool keepdim) {
  const int64_t rank = a.shape.size();
  for (int64_t d : dims) NNX_CHECK(d >= 0 && d < rank, "dim {} is out of range for rank {}", d, rank);
  Layout out{{}, {}, a.partial};
  std::vector<detail::DimRole> in_roles, out_roles;
  for (int64_t d = 0; d < rank; ++d) {
    const bool summed = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (summed) out.partial.insert(out.partial.end(), a.dims[d].begin(), a.dims[d].end());
    if (summed && !keepdim) {
      in_roles.push_back({"r", -1});
      continue;
    }
    in_roles.push_back({summed ? "r" : "i", summed ? -1 : static_cast<int64_t>(out.shape.size())});
    out_roles.push_back({summed ? "r" : "i", static_cast<int64_t>(out.shape.size())});
    out.shape.push_back(summed ? 1 : a.shape[d]);
    out.dims.push_back(summed ? Axes{} : a.dims[d]);
  }
  OpPlan plan{"sum", {a}, {a}, {}, std::move(out), {}};
  detail::finish_plan(plan, rule_table("sum"), {in_roles}, out_roles);
  return plan;
}

}  // namespace nnx
