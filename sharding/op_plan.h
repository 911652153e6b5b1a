// Op sharding rules as data. Each op's rule table lists, per mesh axis, where its inputs may
// hold that axis and where the output then holds it. A planner reads the inputs' layouts alone
// (no tensors, no communication), picks the targets, and names the row each axis took; the op
// then runs the plan it is given. `NNX_LOG_REDISTRIBUTE=1` prints the steps it runs.
#pragma once

#include <nnx/core/shape.h>
#include <nnx/sharding/partition_spec.h>
#include <nnx/sharding/redistribute_plan.h>

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nnx {

// A layout without data: global shape, mesh axes per dim (major first), pending-sum axes.
struct Layout {
  Shape shape;
  std::vector<Axes> dims;
  Axes partial;

  // `spec` may be shorter than the shape (the rest replicated).
  static Layout of(Shape shape, const PartitionSpec& spec, Axes partial = {});
  PartitionSpec spec() const;
  std::string to_string() const;  // "(8, 16) PartitionSpec('a', None) + pending sum over (b)"
  bool operator==(const Layout&) const = default;
};

// One row of a rule table: the placement of one mesh axis in each input and in the output.
// A placement is "R" (replicated), "P" (a pending sum) or "S(role)" (splits the dim playing
// `role`, e.g. "S(k)" for matmul's contracted dim).
struct RuleRow {
  std::vector<std::string> inputs;
  std::string output;
  std::string collective;  // what the row itself communicates
  std::string to_string() const;  // "S(k) · S(k) -> P (none: the sum stays pending)"
};

struct OpRule {
  std::string op;     // "matmul"
  std::string roles;  // what each role names, e.g. "a: [batch..., m, k], b: [batch..., k, n]"
  std::vector<RuleRow> rows;  // the planner prefers earlier rows
  std::string to_string() const;  // the whole table, a row per line
};

// The tables: matmul, add (also sub), mul, div, where and sum.
const std::vector<OpRule>& rule_tables();
const OpRule& rule_table(std::string_view op);

// How an elementwise op treats its operands' pending sums.
enum class Linearity {
  linear,     // a + b, a - b: both may be pending along the same axis
  bilinear,   // a * b: one operand per axis may be pending
  numerator,  // a / b: only a may be pending
};

// A planned op: each input's target layout with the steps that reach it, the output's layout,
// and the table row each mesh axis took.
struct OpPlan {
  std::string op;
  std::vector<Layout> inputs, targets;
  std::vector<RedistributePlan> steps;  // inputs[i] -> targets[i]
  Layout output;
  std::vector<std::pair<std::string, RuleRow>> rows;  // mesh axis -> the row it took
  bool communicates() const;
  std::string to_string() const;
};

OpPlan plan_matmul(const Layout& a, const Layout& b);
// `op` names the plan ("add", "sub", "mul", "div"); `linearity` decides its table.
OpPlan plan_elementwise(std::string op, const Layout& a, const Layout& b, Linearity linearity);
// where(condition, x, y): laid out as x, then y, then the condition where those broadcast; the
// condition holds no pending sum.
OpPlan plan_where(const Layout& condition, const Layout& x, const Layout& y);
// `dims` sorted, each in [0, rank).
OpPlan plan_sum(const Layout& a, const std::vector<int64_t>& dims, bool keepdim);

// Bytes each rank receives running the plan's input steps (see plan_bytes_per_rank above).
int64_t plan_bytes_per_rank(const OpPlan& plan, const std::map<std::string, int64_t>& axis_sizes,
                            int64_t itemsize);

}  // namespace nnx
