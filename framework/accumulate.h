// Gradient accumulation over micro-batches: the mean loss and mean gradients of
// fn(model, i) for i < micro_batches, as one big batch of equal-sized micro-batches would give:
//   auto [loss, grads] = nnx::value_and_grad_accumulated(
//       [&](MLP& m, int64_t i) { return loss_fn(m, micro_x[i], micro_y[i]); }, model, 4);
// Gradients add up locally over the micro-batches; the reduction runs once per step, its
// buckets starting during the last micro-batch's backward.
#pragma once

#include <nnx/core/error.h>
#include <nnx/framework/value_and_grad.h>
#include <nnx/sharding/ops.h>

namespace nnx {

namespace detail {
// Every value scaled by s (in place).
void scale_grads(State& grads, double s);
}  // namespace detail

template <class M, class Fn>
LossAndGrads value_and_grad_accumulated(Fn&& fn, M& model, int64_t micro_batches,
                                        const GradOptions& options = {}) {
  NNX_CHECK(micro_batches >= 1, "micro_batches must be >= 1, got {}", micro_batches);
  State leaves = detail::prepare_grad_leaves(model, options.wrt);
  detail::GradientReducer reducer(leaves, options.bucket_cap_bytes, options.overlap);
  LossAndGrads total;
  for (int64_t i = 0; i < micro_batches; ++i) {
    Array loss = fn(model, i);
    reducer.backward(loss, i + 1 == micro_batches);
    // What this micro-batch wrote from its graph, freed now, is a plain value for the next one.
    detail::detach_written_variables(model);
    loss = loss.with_local(loss.local().detach());
    total.loss = i == 0 ? loss : total.loss + loss;
  }
  total.grads = reducer.finish();
  detail::scale_grads(total.grads, 1.0 / static_cast<double>(micro_batches));
  total.loss = total.loss * (1.0 / static_cast<double>(micro_batches));
  return total;
}

}  // namespace nnx
