// nnx's Adam step on CUDA tensors: Adam's moments, then optionally decoupled weight decay, then
// the scale by the learning rate and the parameter update, in one kernel over many tensors. Its
// arithmetic is that of the fused pass (fused_stage.cpp) operation for operation, so its values
// equal optax's bit for bit. Plain C++: this header is shared by the .cu and LibTorch sources.
#pragma once

#include <cstddef>
#include <cstdint>

namespace nnx::optim::detail::cuda {

// Every scalar of the step in the tensors' dtype, rounded as the fused pass rounds them.
template <class T> struct AdamScalars {
  T one_minus_b1, b1, one_minus_b2, b2;
  T bias_reciprocal1, bias_reciprocal2;  // 1 / (1 - b^step), in T
  T eps, weight_decay, scale;            // scale: -learning_rate
};

// One parameter's contiguous device blocks, of `numel` elements each.
struct AdamBlocks {
  void* param;
  const void* gradient;
  void* mu;
  void* nu;
  int64_t numel;
  bool decayed;  // weight decay applies to this parameter
};

// Enqueues the step for `count` parameters on `stream` (a cudaStream_t) with T = float or
// double. Returns null, or the CUDA runtime's message for a launch that failed.
template <class T>
const char* enqueue_adam_step(const AdamBlocks* blocks, size_t count, const AdamScalars<T>& s,
                              void* stream);

}  // namespace nnx::optim::detail::cuda
