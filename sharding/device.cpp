// Device queries; the NCCL half lives in sharding/nccl/ and is compiled only with CUDA parts.
#include <nnx/sharding/device.h>

#include <torch/cuda.h>

#ifdef NNX_WITH_CUDA
#include <nnx/sharding/detail/nccl/nccl_status.h>
#endif

namespace nnx {

bool built_with_cuda() {
#ifdef NNX_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() { return static_cast<int>(torch::cuda::device_count()); }

std::string nccl_version() {
#ifdef NNX_WITH_CUDA
  return detail::nccl_library_version();
#else
  return {};
#endif
}

}  // namespace nnx
