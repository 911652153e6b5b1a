// Builds without CUDA parts have no device engine: CUDA tensors cannot arise there.
#include <nnx/sharding/detail/device_engine.h>

#ifndef NNX_WITH_CUDA
namespace nnx::detail {

std::shared_ptr<DeviceEngine> make_device_engine(MPI_Comm, int, int, c10::Device,
                                                 const std::string&) {
  return nullptr;
}

}  // namespace nnx::detail
#endif
