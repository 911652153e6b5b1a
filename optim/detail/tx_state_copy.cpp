// Copies of transformation states for all-or-nothing updates.
#include <nnx/core/error.h>
#include <nnx/optim/detail/tx_state_copy.h>

namespace nnx::optim::detail {

namespace {
Variable fresh(const Variable& v) {
  return !v.defined() ? v : nnx::detail::variable_like(v, v.value());
}
}  // namespace

TxState shallow_copy(const TxState& state) {
  TxState out;
  out.count = fresh(state.count);
  out.slot_names = state.slot_names;
  for (const auto& slot : state.slots) {
    State copy;
    for (const auto& [path, v] : slot) copy.add(path, fresh(v));
    out.slots.push_back(std::move(copy));
  }
  for (const auto& inner : state.inner) out.inner.push_back(shallow_copy(inner));
  return out;
}

namespace {
bool same_structure(const TxState& a, const TxState& b) {
  if (a.slots.size() != b.slots.size() || a.inner.size() != b.inner.size() ||
      a.count.defined() != b.count.defined())
    return false;
  for (size_t s = 0; s < a.slots.size(); ++s)
    if (a.slots[s].paths() != b.slots[s].paths()) return false;
  for (size_t i = 0; i < a.inner.size(); ++i)
    if (!same_structure(a.inner[i], b.inner[i])) return false;
  return true;
}

void assign_checked(TxState& into, const TxState& from) {
  if (into.count.defined()) into.count.set_value(from.count.value());
  for (size_t s = 0; s < into.slots.size(); ++s) {
    auto source = from.slots[s].begin();
    for (auto& [path, v] : into.slots[s]) v.set_value((source++)->second.value());
  }
  for (size_t i = 0; i < into.inner.size(); ++i) assign_checked(into.inner[i], from.inner[i]);
}
}  // namespace

void assign_values(TxState& into, const TxState& from) {
  NNX_CHECK(same_structure(into, from),
            "nothing was updated: a transformation changed the structure of its state (slots or "
            "their paths) during update; a transformation's update may change only values");
  assign_checked(into, from);
}

}  // namespace nnx::optim::detail
