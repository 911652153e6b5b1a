// The op rule tables (see op_plan.h): data only, read by the planners and by tests.
#include <nnx/core/error.h>
#include <nnx/sharding/op_plan.h>

#include <fmt/format.h>

namespace nnx {

namespace {

const char* kNone = "none";
const char* kPending = "none: the sum stays pending until an op needs it whole";

// where(condition, x, y): each of the three splits the output's dim i or broadcasts there, and
// only x and y may be pending, together (the op is linear in the pair).
OpRule where_rule() {
  OpRule rule{"where", "condition, x, y: the output's dims i (an operand spans i or broadcasts "
                       "there)", {}};
  for (int split = 7; split >= 1; --split) {  // which operands split i: all three first
    std::vector<std::string> inputs;
    for (int operand = 0; operand < 3; ++operand)
      inputs.push_back(split >> (2 - operand) & 1 ? "S(i)" : "R");
    rule.rows.push_back({inputs, "S(i)", split == 7 ? kNone : "none: the others broadcast there"});
  }
  rule.rows.push_back({{"R", "P", "P"}, "P",
                       "none: a whole x or y is made pending first; the sum stays pending"});
  rule.rows.push_back({{"R", "R", "R"}, "R", kNone});
  return rule;
}

std::vector<OpRule> make_op_rules() {
  const std::vector<RuleRow> split_alike = {
      {{"S(i)", "S(i)"}, "S(i)", kNone},
      {{"S(i)", "R"}, "S(i)", "none: b is whole along i (it broadcasts there)"},
      {{"R", "S(i)"}, "S(i)", "none: a is whole along i (it broadcasts there)"},
  };
  auto elementwise = [&](std::string op, std::string roles, std::vector<RuleRow> pending) {
    OpRule rule{std::move(op), std::move(roles), split_alike};
    for (auto& row : pending) rule.rows.push_back(std::move(row));
    rule.rows.push_back({{"R", "R"}, "R", kNone});
    return rule;
  };
  const std::string dims = "a, b: the output's dims i (an operand spans i or broadcasts there)";
  return {
      {"matmul",
       "a: [batch..., m, k], b: [batch..., k, n], out: [batch..., m, n]",
       {
           {{"P", "R"}, "P", "none: a's pending sum passes through (linear in a)"},
           {{"S(batch)", "S(batch)"}, "S(batch)", kNone},
           {{"S(batch)", "R"}, "S(batch)", "none: b broadcasts that batch dim"},
           {{"S(m)", "R"}, "S(m)", kNone},
           {{"S(k)", "S(k)"}, "P", kPending},
           {{"R", "S(batch)"}, "S(batch)", "none: a broadcasts that batch dim"},
           {{"R", "P"}, "P", "none: b's pending sum passes through (linear in b)"},
           {{"R", "S(n)"}, "S(n)", kNone},
           {{"R", "R"}, "R", kNone},
       }},
      elementwise("add", dims + "; also sub",
                  {{{"P", "P"}, "P", "none: a replicated operand is made pending first"}}),
      elementwise("mul", dims,
                  {{{"P", "R"}, "P", kPending}, {{"R", "P"}, "P", kPending}}),
      elementwise("div", dims, {{{"P", "R"}, "P", kPending}}),
      where_rule(),
      {"sum",
       "a: kept dims i, summed dims r",
       {
           {{"P"}, "P", kPending},
           {{"S(r)"}, "P", "none: each rank sums its block; the sum stays pending"},
           {{"S(i)"}, "S(i)", kNone},
           {{"R"}, "R", kNone},
       }},
  };
}

}  // namespace

std::string RuleRow::to_string() const {
  return fmt::format("{} -> {} ({})", fmt::join(inputs, " · "), output, collective);
}

std::string OpRule::to_string() const {
  std::string out = fmt::format("{} ({})", op, roles);
  for (const auto& row : rows) out += "\n  " + row.to_string();
  return out;
}

const std::vector<OpRule>& rule_tables() {
  static const std::vector<OpRule> tables = make_op_rules();
  return tables;
}

const OpRule& rule_table(std::string_view op) {
  for (const auto& rule : rule_tables())
    if (rule.op == op) return rule;
  NNX_FAIL("no rule table for op '{}'; the tables cover matmul, add, mul, div, where and sum",
           op);
}

}  // namespace nnx
