// value_and_grad: the loss of a model and the gradients of its parameters, already reduced over
// the mesh axes each parameter is replicated on (the all-reduces a compiler would insert):
//   auto [loss, grads] = nnx::value_and_grad([&](MLP& m) { return loss_fn(m, batch); }, model);
// The reduction runs once per step in size-capped buckets, in the same order on every rank,
// each bucket starting during backward as soon as its gradients exist (gradient_reducer.h); a
// parameter with optimizer_sharding (ZeRO-1) is reduce-scattered into its optimizer layout.
#pragma once

#include <nnx/framework/filter.h>
#include <nnx/framework/gradient_reducer.h>
#include <nnx/framework/graph.h>
#include <nnx/framework/state.h>

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace nnx {

struct GradOptions {
  Filter wrt = OfType<Param>;                // which variables get gradients
  int64_t bucket_cap_bytes = 25 << 20;       // 25 MiB per all-reduce, as DDP
  bool overlap = true;                       // start buckets from autograd hooks during backward
};

struct LossAndGrads {
  Array loss;
  State grads;  // path -> gradient (same kind and layout as the variable; ZeRO: the optimizer's)
};

template <class Aux> struct LossAuxAndGrads {
  Array loss;
  Aux aux;
  State grads;
};

namespace detail {
// Marks the selected variables' tensors as autograd leaves; returns them in state order.
State prepare_grad_leaves(Module& module, const Filter& wrt);
// After backward: every variable of `module` the loss function wrote from the graph (a cache, a
// sown value) holds a plain tensor again, as Flax's state updates come out of a transform.
void detach_written_variables(Module& module);

template <class T> struct is_pair_or_tuple : std::false_type {};
template <class A, class B> struct is_pair_or_tuple<std::pair<A, B>> : std::true_type {};
template <class... Ts> struct is_pair_or_tuple<std::tuple<Ts...>> : std::true_type {};
template <class T> struct is_std_map : std::false_type {};
template <class K, class V, class C, class A>
struct is_std_map<std::map<K, V, C, A>> : std::true_type {};

// The aux with its Arrays and tensors (in pairs, tuples, vectors, maps and optionals too)
// detached, as jax's has_aux values are plain values: through the graph backward freed, a later
// backward would fail, or reach the old leaves.
template <class T> T detached_aux(T value) {
  if constexpr (std::is_same_v<T, Array>) {
    if (value.defined() && value.local().requires_grad())
      return value.with_local(value.local().detach());
    return value;
  } else if constexpr (std::is_same_v<T, at::Tensor>) {
    return value.defined() && value.requires_grad() ? value.detach() : value;
  } else if constexpr (is_pair_or_tuple<T>::value) {
    std::apply([](auto&... parts) { ((parts = detached_aux(std::move(parts))), ...); }, value);
    return value;
  } else if constexpr (is_vector<T>::value) {
    if constexpr (!std::is_same_v<typename T::value_type, bool>)  // bits hold no tensors
      for (auto& part : value) part = detached_aux(std::move(part));
    return value;
  } else if constexpr (is_std_map<T>::value) {
    for (auto& [key, part] : value) part = detached_aux(std::move(part));
    return value;
  } else if constexpr (is_optional<T>::value) {
    if (value) *value = detached_aux(std::move(*value));
    return value;
  } else {
    return value;
  }
}
}  // namespace detail

// fn(model) returns the scalar loss Array, or a std::pair(loss, aux) for has_aux.
template <class M, class Fn> auto value_and_grad(Fn&& fn, M& model, const GradOptions& options = {}) {
  State leaves = detail::prepare_grad_leaves(model, options.wrt);
  detail::GradientReducer reducer(leaves, options.bucket_cap_bytes, options.overlap);
  auto result = fn(model);
  if constexpr (std::is_same_v<std::decay_t<decltype(result)>, Array>) {
    reducer.backward(result, true);
    State grads = reducer.finish();
    detail::detach_written_variables(model);
    return LossAndGrads{result.with_local(result.local().detach()), std::move(grads)};
  } else {
    auto& [loss, aux] = result;
    reducer.backward(loss, true);
    State grads = reducer.finish();
    detail::detach_written_variables(model);
    using Aux = std::decay_t<decltype(aux)>;
    return LossAuxAndGrads<Aux>{loss.with_local(loss.local().detach()),
                                detail::detached_aux(std::move(aux)), std::move(grads)};
  }
}

// nnx.grad: the gradients only, reduced as value_and_grad reduces them.
template <class M, class Fn> State grad(Fn&& fn, M& model, const GradOptions& options = {}) {
  return std::move(value_and_grad(std::forward<Fn>(fn), model, options).grads);
}

}  // namespace nnx
