// The accelerators this build and this machine offer: CUDA devices and the NCCL library. Every
// build has these queries; without CUDA they report none.
#pragma once

#include <string>

namespace nnx {

// True when nnx was built with its CUDA/NCCL parts (NNX_WITH_CUDA).
bool built_with_cuda();
// CUDA devices visible to this process (0 without a GPU or without CUDA parts).
int cuda_device_count();
// The loaded NCCL library's version as "major.minor.patch"; empty without CUDA parts.
std::string nccl_version();

}  // namespace nnx
