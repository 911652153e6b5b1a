// nnx's optimizer step on CUDA tensors: a chain of the built-in stages (scale, trace, Adam, RMS,
// Lion, decoupled weight decay, clipping) and the parameter update in one kernel over many
// tensors of float32, float64, bfloat16 or float16. Each stage's arithmetic is that of the fused
// pass (fused_stage.cpp) operation for operation, so its values equal the CPU's and optax's bit
// for bit (NaNs aside). Plain C++: this header is shared by the .cu and LibTorch sources.
#pragma once

#include <cstddef>
#include <cstdint>

namespace nnx::optim::detail::cuda {

constexpr int kMaxStages = 8;  // operations in one chain
constexpr int kMaxSlots = 4;   // per-parameter state tensors (moments, traces) of one chain

enum class StepKind : int32_t { scale, trace, nesterov_trace, adam, rms, lion, decay, clip };

// How the blocks are stored: in the type computed in (float, double), or as bfloat16 or float16
// computed in float with every operation's result rounded to the storage type.
enum class Storage : int32_t { computed, bfloat16, float16 };

// One stage with its scalars in the type computed in, rounded as the fused pass rounds them
// (for bfloat16 and float16 blocks each is also rounded to the storage type):
//   scale: s[0] = factor                     trace, nesterov_trace: s[0] = decay
//   adam: 1 - b1, b1, 1 - b2, b2, 1 / (1 - b1^t), 1 / (1 - b2^t), eps_root, eps (bfloat16:
//         s[4], s[5] are 1 - b^t, which the moments are divided by; float16: the reciprocals of
//         1 - b^t rounded to float16)
//   rms: 1 - decay, decay, eps               lion: 1 - b1, b1, 1 - b2, b2
//   decay: weight_decay                      clip: norm, max_norm (present only when it clips)
// `slot`: the index of its first state tensor among a parameter's slots.
template <class T> struct StepOp {
  StepKind kind;
  int32_t slot;
  T s[8];
};

template <class T> struct StepProgram {
  StepOp<T> ops[kMaxStages];
  int32_t count;
};

// One parameter's contiguous device blocks, of `numel` elements each. `out` is `param`, which
// then takes p + u in place, or (ZeRO: `param` is this rank's slice, only read) the block that
// takes the update u alone.
struct StepBlocks {
  void* param;
  const void* gradient;
  void* slots[kMaxSlots];
  int64_t numel;
  uint32_t skipped;  // bit k: operation k leaves this parameter alone (weight decay's mask)
  void* out;
};

// Null, or the message of an error the CUDA runtime holds from earlier work (and clears if it
// can): asked before a step, so that a step whose first launch went through does not fail later.
const char* pending_error();

// Enqueues the step for `count` parameters on `stream` (a cudaStream_t) with T = float or
// double; blocks stored as `storage` (bfloat16 and float16 with T = float only). Returns null, or
// the CUDA runtime's message for a launch that failed.
template <class T>
const char* enqueue_fused_step(const StepBlocks* blocks, size_t count, const StepProgram<T>& program,
                               Storage storage, void* stream);

}  // namespace nnx::optim::detail::cuda
