// Naming the rule-table row each mesh axis of a plan took; a plan no row accepts is a bug.
#pragma once

#include <nnx/sharding/op_plan.h>

#include <cstdint>
#include <string>
#include <vector>

namespace nnx::detail {

// The role a dim plays in a rule table ("m", "k", "i") and the output dim it maps to (-1 none).
struct DimRole {
  std::string name;
  int64_t out_dim = -1;
};

// Fills plan.steps (inputs -> targets) and plan.rows, given each target's and the output's dim
// roles; throws naming the axis when the plan fits no row of `rule`.
void finish_plan(OpPlan& plan, const OpRule& rule,
                 const std::vector<std::vector<DimRole>>& target_roles,
                 const std::vector<DimRole>& output_roles);

}  // namespace nnx::detail
