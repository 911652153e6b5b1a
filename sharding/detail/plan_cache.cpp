// The per-thread plan cache (see plan_cache.h).
#include <nnx/sharding/detail/hash_mix.h>
#include <nnx/sharding/detail/local_steps.h>
#include <nnx/sharding/detail/plan_cache.h>
#include <nnx/sharding/spec_check.h>

#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

namespace nnx::detail {

namespace {

constexpr size_t kMaxPlans = 4096;  // beyond this the cache starts over

struct Entry {
  std::string op;
  int64_t argument;
  SharedPlan plan;
  // The input layouts last found equal to the plan's: the same pointers again match at once.
  std::vector<std::shared_ptr<const ArrayLayout>> seen;
};

thread_local std::unordered_multimap<uint64_t, Entry> plans;

// Whether `a` is laid out as `layout` (a spec shorter than the shape leaves the rest whole).
bool same_layout(const Layout& layout, const Array& a) {
  if (layout.shape != a.shape() || layout.partial != a.partial_axes()) return false;
  const auto& entries = a.spec().entries();
  for (size_t d = 0; d < layout.dims.size(); ++d) {
    const Axes& have = d < entries.size() ? entries[d].names() : Axes{};
    if (have != layout.dims[d]) return false;
  }
  return true;
}

}  // namespace

uint64_t plan_key(std::string_view op, int64_t argument,
                  std::initializer_list<const Array*> inputs) {
  uint64_t h = hash_mix(std::hash<std::string_view>{}(op), static_cast<uint64_t>(argument));
  for (const Array* a : inputs) h = hash_mix(h, a->layout()->hash());
  return h;
}

SharedPlan find_plan(uint64_t key, std::string_view op, int64_t argument,
                     std::initializer_list<const Array*> inputs) {
  auto [first, last] = plans.equal_range(key);
  for (auto it = first; it != last; ++it) {
    Entry& e = it->second;
    if (e.argument != argument || e.plan->plan.inputs.size() != inputs.size() || e.op != op)
      continue;
    bool same = true;
    size_t i = 0;
    for (const Array* a : inputs) {
      if (e.seen[i] != a->layout()) {
        if (!same_layout(e.plan->plan.inputs[i], *a)) {
          same = false;
          break;
        }
        e.seen[i] = a->layout();
      }
      ++i;
    }
    if (same) return e.plan;
  }
  return nullptr;
}

SharedPlan remember_plan(uint64_t key, std::string_view op, int64_t argument, OpPlan plan) {
  if (plans.size() >= kMaxPlans) plans.clear();
  PartitionSpec output_spec = plan.output.spec();
  auto output_layout = std::make_shared<const ArrayLayout>(
      plan.output.shape, pad_spec(output_spec, plan.output.shape.size()), plan.output.partial);
  const size_t inputs = plan.inputs.size();
  std::vector<bool> moves_locally(inputs);
  for (size_t i = 0; i < inputs; ++i)
    moves_locally[i] = !plan.steps[i].steps.empty() && stays_local(plan.steps[i]);
  auto shared = std::make_shared<const PlannedOp>(PlannedOp{
      std::move(plan), std::move(output_spec), std::move(output_layout), std::move(moves_locally)});
  plans.emplace(key, Entry{std::string(op), argument, shared,
                           std::vector<std::shared_ptr<const ArrayLayout>>(inputs)});
  return shared;
}

}  // namespace nnx::detail
