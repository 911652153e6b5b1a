// GradientReducer: the reduction value_and_grad inserts after (and during) backward. Buckets of
// parameters that share replica axes and dtype, capped in bytes, in reverse state order (backward
// reaches the last layers first); autograd hooks start each bucket's nonblocking reduction as
// soon as its gradients exist, always in bucket order, so every rank issues the same sequence.
#pragma once

#include <nnx/framework/state.h>

#include <cstdint>
#include <memory>

namespace nnx {

// What value_and_grad's reductions did on this thread (tests and benchmarks reset and read it).
struct GradientReductionCounts {
  int64_t all_reduce_buckets = 0;      // all-reduces of replicated parameters' gradients
  int64_t reduce_scatter_buckets = 0;  // reduce-scatters of ZeRO parameters' gradients
  int64_t started_in_backward = 0;     // buckets of either kind started from autograd hooks
};
GradientReductionCounts& gradient_reduction_counts();

namespace detail {

// Whether a GradientReducer lives on this thread: a value_and_grad or accumulate call is running
// its loss function.
bool gradient_in_progress();

class GradientReducer {
 public:
  // `leaves` are the autograd leaves of prepare_grad_leaves, in state order.
  GradientReducer(State& leaves, int64_t bucket_cap_bytes, bool overlap);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Backward from a scalar loss; gradients add up over calls (micro-batches). Only the last call
  // (last = true) starts reductions from hooks.
  void backward(const Array& loss, bool last);
  // Starts what is left, waits for all, checks every rank got every gradient, detaches the
  // leaves, and returns path -> reduced gradient in the parameter's (or ZeRO) layout.
  State finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace detail
}  // namespace nnx
