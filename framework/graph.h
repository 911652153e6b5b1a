// The functional graph API of Flax NNX: split a module into a GraphDef (its structure) and
// States (its variables), merge them back, and state/update/clone/pop/eval_shape.
#pragma once

#include <nnx/framework/filter.h>
#include <nnx/framework/materialize.h>
#include <nnx/framework/module.h>
#include <nnx/framework/state.h>

#include <nlohmann/json.hpp>

#include <array>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

namespace nnx {

namespace detail {

// The structure of a module: a copy whose variables hold only kind, metadata, shape and dtype.
class GraphDefBase {
 public:
  GraphDefBase(const Module& module, ModuleCopier copy);
  const Module& skeleton() const { return *skeleton_; }
  // Copies the skeleton (as the type the GraphDef was made for).
  std::unique_ptr<Module> copy_skeleton() const { return copy_(*skeleton_); }
  // {"type", "modules": [{path, type}], "variables": [{path, kind, dtype, shape, metadata,
  //  shared_with?}]}
  nlohmann::json to_json() const;

 private:
  std::shared_ptr<const Module> skeleton_;
  ModuleCopier copy_;
};

std::vector<State> split_states(const Module& module, const std::vector<Filter>& filters,
                                bool exhaustive, const char* who);
std::unique_ptr<Module> merge_states(const GraphDefBase& graphdef,
                                     const std::vector<const State*>& states);
void update_states(Module& module, const std::vector<const State*>& states);
std::unique_ptr<Module> clone_module(const Module& module, ModuleCopier copy);
std::vector<State> pop_states(Module& module, const std::vector<Filter>& filters);

template <size_t N, class... F> std::vector<Filter> to_filters(F&&... filters) {
  return {Filter(std::forward<F>(filters))...};
}

template <size_t... I>
auto states_tuple(std::vector<State>& states, std::index_sequence<I...>) {
  return std::make_tuple(std::move(states[I])...);
}

template <class M> M take_module(std::unique_ptr<Module> module) {
  return std::move(static_cast<M&>(*module));
}

}  // namespace detail

// Flax's nnx.GraphDef[M]: what merge needs, besides States, to rebuild an M.
template <class M> class GraphDef : public detail::GraphDefBase {
 public:
  explicit GraphDef(const M& module) : GraphDefBase(module, &detail::copy_as<M>) {}
};

// split(module, filters...) -> (GraphDef, State per filter); with no filter, one State of
// everything. The first matching filter takes a variable; filters must cover every variable
// (end with nnx::Everything to take the rest), and Everything may only come last.
template <class M, class... F> auto split(const M& module, F&&... filters) {
  static_assert(std::is_base_of_v<Module, M>, "nnx::split takes a Module");
  constexpr size_t n = sizeof...(F) == 0 ? 1 : sizeof...(F);
  std::vector<Filter> fs;
  if constexpr (sizeof...(F) == 0) fs.push_back(Everything);
  else fs = detail::to_filters<n>(std::forward<F>(filters)...);
  auto states = detail::split_states(module, fs, true, "split");
  return std::tuple_cat(std::make_tuple(GraphDef<M>(module)),
                        detail::states_tuple(states, std::make_index_sequence<n>{}));
}

// state(module) -> State of every variable; state(module, f) -> the State f selects;
// state(module, f1, f2, ...) -> tuple of States (first matching filter wins).
template <class... F> auto state(const Module& module, F&&... filters) {
  std::vector<Filter> fs;
  if constexpr (sizeof...(F) == 0) fs.push_back(Everything);
  else fs = detail::to_filters<sizeof...(F)>(std::forward<F>(filters)...);
  auto states = detail::split_states(module, fs, false, "state");
  if constexpr (sizeof...(F) <= 1) return std::move(states[0]);
  else return detail::states_tuple(states, std::make_index_sequence<sizeof...(F)>{});
}

// Rebuilds a module from its GraphDef and States: new variables over the States' tensors (no
// copy, as Flax shares immutable arrays): an in-place change to one shows in the other; use
// clone for independent storage.
// Missing, unknown, mistyped or misshapen paths throw, listing every bad path.
template <class M, class... S> M merge(const GraphDef<M>& graphdef, const S&... states) {
  static_assert((std::is_same_v<S, State> && ...), "nnx::merge takes a GraphDef and States");
  return detail::take_module<M>(detail::merge_states(graphdef, {&states...}));
}

// Sets the module's variables to the values and metadata of the States' variables, by path,
// copying values into the existing tensors (so references to them stay valid).
// Everything is checked first: on any unknown path, shape or dtype mismatch nothing changes.
template <class... S> void update(Module& module, const S&... states) {
  static_assert((std::is_same_v<S, State> && ...), "nnx::update takes a Module and States");
  detail::update_states(module, {&states...});
}

// A deep copy: new variables with copied tensors; shared variables stay shared in the copy.
template <class M> M clone(const M& module) {
  static_assert(std::is_base_of_v<Module, M>, "nnx::clone takes a Module");
  return detail::take_module<M>(detail::clone_module(module, &detail::copy_as<M>));
}

// Removes the variables the filters select from the module (their handles become empty) and
// returns them: one State per filter, or the State itself for one filter.
template <class... F> auto pop(Module& module, F&&... filters) {
  static_assert(sizeof...(F) > 0, "nnx::pop needs at least one filter");
  auto states = detail::pop_states(module, detail::to_filters<sizeof...(F)>(std::forward<F>(filters)...));
  if constexpr (sizeof...(F) == 1) return std::move(states[0]);
  else return detail::states_tuple(states, std::make_index_sequence<sizeof...(F)>{});
}

// Runs fn with initialization made abstract: variables get shapes, dtypes and metadata but no
// storage and no computation (jax.eval_shape / nnx.eval_shape).
template <class Fn> auto eval_shape(Fn&& fn) {
  detail::AbstractInitScope scope;
  return std::forward<Fn>(fn)();
}

// GraphDef and State together as one JSON document: {"graphdef": ..., "state": ...}.
nlohmann::json to_json(const detail::GraphDefBase& graphdef, const State& state,
                       bool with_values = false);

}  // namespace nnx
