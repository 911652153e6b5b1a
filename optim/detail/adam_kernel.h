// Adam and AdamW chains (adam(), adamw(): Adam, decoupled weight decay, the learning rate) on
// device tensors as one call of LibTorch's fused AdamW kernel per group, instead of a dozen
// elementwise kernels per parameter. Its rates are set so that its step is optax's up to
// rounding (optax's bias corrections included); on CPU tensors nnx's own pass (fused_stage.h),
// equal to optax's bit for bit, runs instead.
#pragma once

#include <nnx/framework/state.h>
#include <nnx/optim/detail/fused_stage.h>

namespace nnx::optim::detail {

// True when the kernel may take these updates and parameters: one floating dtype (float32 or
// float64) on one CUDA device (or the CPU, where set_adam_kernel_on_cpu asks for it),
// contiguous parameters, gradients of the parameters' shapes.
bool adam_kernel_applies(const State& updates, const State& params);

// The whole step for `params` (updated in place) if `stage` is an Adam chain; false, having
// changed nothing, where it is not.
bool run_adam_kernel(FusedStage& stage, State& params, const State& updates);

// Lets the kernel take CPU tensors (for tests on machines without a GPU).
void set_adam_kernel_on_cpu(bool on);
// How many steps this process has run through the kernel (for tests).
int64_t adam_kernel_steps();

}  // namespace nnx::optim::detail
