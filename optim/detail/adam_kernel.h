// Adam and AdamW chains (adam(), adamw(): Adam, decoupled weight decay, the learning rate) on
// CUDA tensors as nnx's own kernel (cuda/adam_step.h): one launch for up to 40 parameters
// instead of a dozen elementwise kernels per parameter, with the fused pass's arithmetic, so its
// values equal optax's (and the CPU's) bit for bit. CPU tensors take the fused pass itself.
#pragma once

#include <nnx/framework/state.h>
#include <nnx/optim/detail/fused_stage.h>

namespace nnx::optim::detail {

// True when the kernel may take these updates and parameters: one floating dtype (float32 or
// float64) on one CUDA device, contiguous parameters, gradients of the parameters' shapes.
bool adam_kernel_applies(const State& updates, const State& params);

// The whole step for `params` (updated in place) if `stage` is an Adam chain; false, having
// changed nothing, where it is not.
bool run_adam_kernel(FusedStage& stage, State& params, const State& updates);

// How many steps this process has run through the kernel (for tests).
int64_t adam_kernel_steps();

}  // namespace nnx::optim::detail
