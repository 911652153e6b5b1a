// Every built-in chain (Adam, AdamW, Lion, SGD with or without momentum, RMSProp, with weight
// decay, clipping and schedules) on CUDA tensors of float32, float64, bfloat16 or float16 as
// nnx's own kernel (cuda/fused_step.h): one launch for up to 32 parameters instead of a dozen
// elementwise kernels per parameter, with the fused pass's arithmetic, so its values equal
// optax's (and the CPU's) bit for bit, NaNs aside. CPU tensors take the fused pass itself.
#pragma once

#include <nnx/framework/state.h>
#include <nnx/optim/detail/fused_stage.h>

#include <vector>

namespace nnx::optim::detail {

// `view` is what the transformations see of each parameter: the parameter itself, or under
// ZeRO (`sliced[i]`) this rank's slice of it, which the state and `updates` match.

// True when the kernel may take these updates and parameters: one floating dtype (float32,
// float64, bfloat16 or float16) on one CUDA device, contiguous parameters, gradients of the
// shapes in `view`.
bool step_kernel_applies(const State& updates, const State& params, const State& view,
                         const std::vector<bool>& sliced);

// Prepares `stage` and runs the whole step if the kernel can do every stage; false, before
// preparing the stage and having changed nothing, where it cannot. Parameters are updated in
// place, except sliced ones: `zero_updates[i]` then holds the slice's update, for the caller to
// gather into the parameter's layout and add.
bool run_step_kernel(FusedStage& stage, State& params, const State& updates, const State& view,
                     const std::vector<bool>& sliced, std::vector<at::Tensor>& zero_updates);

// How many steps this process has run through the kernel (for tests).
int64_t step_kernel_steps();

}  // namespace nnx::optim::detail
