// Plans already made, per thread, keyed by the op, its argument and its inputs' layouts. The
// planners are pure, so an op on layouts it has seen takes the plan it made before instead of
// planning again (planning costs microseconds; small ops cost less than one).
#pragma once

#include <nnx/sharding/array.h>
#include <nnx/sharding/op_plan.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace nnx::detail {

// A remembered plan with its output's layout built once (shared by every result), and which
// inputs only move on this rank (slices, joining a pending sum): those run the plan's own steps.
struct PlannedOp {
  OpPlan plan;
  PartitionSpec output_spec;
  std::shared_ptr<const ArrayLayout> output_layout;
  std::vector<bool> moves_locally;
};
using SharedPlan = std::shared_ptr<const PlannedOp>;

uint64_t plan_key(std::string_view op, int64_t argument,
                  std::initializer_list<const Array*> inputs);
// The plan remembered under `key` for exactly these op, argument and layouts, or null.
SharedPlan find_plan(uint64_t key, std::string_view op, int64_t argument,
                     std::initializer_list<const Array*> inputs);
SharedPlan remember_plan(uint64_t key, std::string_view op, int64_t argument, OpPlan plan);

// The plan a call site found last, with the layouts it was found for (held, so that their
// addresses cannot be reused by other layouts while remembered).
struct LastPlan {
  std::string op;
  int64_t argument = 0;
  SharedPlan plan;
  size_t count = 0;  // inputs
  std::shared_ptr<const ArrayLayout> layouts[3];

  bool matches(std::string_view o, int64_t a, std::initializer_list<const Array*> inputs) const {
    if (!plan || a != argument || inputs.size() != count || o != op) return false;
    size_t i = 0;
    for (const Array* x : inputs)
      if (layouts[i++] != x->layout()) return false;
    return true;
  }
  void remember(std::string_view o, int64_t a, std::initializer_list<const Array*> inputs,
                const SharedPlan& p) {
    if (inputs.size() > 3) return;
    count = inputs.size();
    op = o;
    argument = a;
    plan = p;
    size_t i = 0;
    for (const Array* x : inputs) layouts[i++] = x->layout();
  }
};

// `make()` returns the OpPlan for these inputs; it runs only on a cache miss. Each call site
// first asks its last plan: an op repeated on the same layouts takes it at once.
template <class Make>
SharedPlan cached_plan(std::string_view op, int64_t argument,
                       std::initializer_list<const Array*> inputs, Make make) {
  thread_local LastPlan last;
  if (last.matches(op, argument, inputs)) return last.plan;
  const uint64_t key = plan_key(op, argument, inputs);
  SharedPlan plan = find_plan(key, op, argument, inputs);
  if (!plan) plan = remember_plan(key, op, argument, make());
  last.remember(op, argument, inputs, plan);
  return plan;
}

}  // namespace nnx::detail
