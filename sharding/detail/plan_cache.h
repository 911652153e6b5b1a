// Plans already made, per thread, keyed by the op, its argument and its inputs' layouts. The
// planners are pure, so an op on layouts it has seen takes the plan it made before instead of
// planning again (planning costs microseconds; small ops cost less than one).
#pragma once

#include <nnx/sharding/array.h>
#include <nnx/sharding/op_plan.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string_view>

namespace nnx::detail {

// A remembered plan with its output's layout built once (shared by every result).
struct PlannedOp {
  OpPlan plan;
  PartitionSpec output_spec;
  std::shared_ptr<const ArrayLayout> output_layout;
};
using SharedPlan = std::shared_ptr<const PlannedOp>;

uint64_t plan_key(std::string_view op, int64_t argument,
                  std::initializer_list<const Array*> inputs);
// The plan remembered under `key` for exactly these op, argument and layouts, or null.
SharedPlan find_plan(uint64_t key, std::string_view op, int64_t argument,
                     std::initializer_list<const Array*> inputs);
SharedPlan remember_plan(uint64_t key, std::string_view op, int64_t argument, OpPlan plan);

// `make()` returns the OpPlan for these inputs; it runs only on a cache miss.
template <class Make>
SharedPlan cached_plan(std::string_view op, int64_t argument,
                       std::initializer_list<const Array*> inputs, Make make) {
  const uint64_t key = plan_key(op, argument, inputs);
  if (SharedPlan plan = find_plan(key, op, argument, inputs)) return plan;
  return remember_plan(key, op, argument, make());
}

}  // namespace nnx::detail
