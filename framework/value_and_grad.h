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
}  // namespace detail

// fn(model) returns the scalar loss Array, or a std::pair(loss, aux) for has_aux.
template <class M, class Fn> auto value_and_grad(Fn&& fn, M& model, const GradOptions& options = {}) {
  State leaves = detail::prepare_grad_leaves(model, options.wrt);
  detail::GradientReducer reducer(leaves, options.bucket_cap_bytes, options.overlap);
  auto result = fn(model);
  if constexpr (std::is_same_v<std::decay_t<decltype(result)>, Array>) {
    reducer.backward(result, true);
    State grads = reducer.finish();
    return LossAndGrads{result.with_local(result.local().detach()), std::move(grads)};
  } else {
    auto& [loss, aux] = result;
    reducer.backward(loss, true);
    State grads = reducer.finish();
    using Aux = std::decay_t<decltype(aux)>;
    return LossAuxAndGrads<Aux>{loss.with_local(loss.local().detach()), std::move(aux),
                                std::move(grads)};
  }
}

// nnx.grad: the gradients only, reduced as value_and_grad reduces them.
template <class M, class Fn> State grad(Fn&& fn, M& model, const GradOptions& options = {}) {
  return std::move(value_and_grad(std::forward<Fn>(fn), model, options).grads);
}

}  // namespace nnx
