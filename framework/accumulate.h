// Gradient accumulation over micro-batches: the mean loss and mean gradients of
// fn(model, i) for i < micro_batches, as one big batch of equal-sized micro-batches would give:
//   auto [loss, grads] = nnx::value_and_grad_accumulated(
//       [&](MLP& m, int64_t i) { return loss_fn(m, micro_x[i], micro_y[i]); }, model, 4);
// Each micro-batch's gradients are reduced as value_and_grad reduces them.
#pragma once

#include <nnx/framework/error.h>
#include <nnx/framework/value_and_grad.h>
#include <nnx/sharding/ops.h>

namespace nnx {

namespace detail {
// acc += g (path by path, same layouts); acc starts empty.
void add_grads(State& acc, const State& g);
// Every value scaled by s (in place).
void scale_grads(State& grads, double s);
}  // namespace detail

template <class M, class Fn>
LossAndGrads value_and_grad_accumulated(Fn&& fn, M& model, int64_t micro_batches,
                                        const GradOptions& options = {}) {
  NNX_CHECK(micro_batches >= 1, "micro_batches must be >= 1, got {}", micro_batches);
  LossAndGrads total;
  for (int64_t i = 0; i < micro_batches; ++i) {
    auto [loss, grads] = value_and_grad([&](M& m) { return fn(m, i); }, model, options);
    total.loss = i == 0 ? loss : total.loss + loss;
    detail::add_grads(total.grads, grads);
  }
  detail::scale_grads(total.grads, 1.0 / static_cast<double>(micro_batches));
  total.loss = total.loss * (1.0 / static_cast<double>(micro_batches));
  return total;
}

}  // namespace nnx
