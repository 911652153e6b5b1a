// Device queries; the NCCL half lives in sharding/nccl/ and is compiled only with CUDA parts.
#include <nnx/core/error.h>
#include <nnx/sharding/detail/device_choice.h>
#include <nnx/sharding/device.h>

#include <torch/cuda.h>

#include <cstdlib>
#include <mutex>
#include <optional>

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

int local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0')
      return std::atoi(value);
  return 0;
}

namespace {
std::mutex device_mutex;
std::optional<c10::Device> chosen_device;
}  // namespace

c10::Device default_device() {
  std::lock_guard lock(device_mutex);
  if (!chosen_device)
    chosen_device = detail::choose_device(std::getenv("NNX_DEVICE"), local_rank(),
                                          cuda_device_count());
  return *chosen_device;
}

void set_default_device(c10::Device device) {
  NNX_CHECK(device.is_cpu() || device.is_cuda(),
            "nnx runs on the CPU or on CUDA devices, not on {}", device.str());
  if (device.is_cuda() && device.has_index())
    NNX_CHECK(device.index() < cuda_device_count(), "{} is not visible: this process sees {} CUDA "
              "devices", device.str(), cuda_device_count());
  std::lock_guard lock(device_mutex);
  chosen_device = device;
}

namespace detail {

c10::Device choose_device(const char* setting, int local_rank, int device_count) {
  const std::string wanted = setting == nullptr ? "" : setting;
  if (wanted == "cpu") return c10::Device(c10::kCPU);
  if (wanted.empty()) {
    if (device_count == 0) return c10::Device(c10::kCPU);
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank % device_count));
  }
  NNX_CHECK(wanted == "cuda" || wanted.rfind("cuda:", 0) == 0,
            "NNX_DEVICE='{}' names no device; use cpu, cuda (one GPU per local rank) or cuda:N",
            wanted);
  NNX_CHECK(device_count > 0, "NNX_DEVICE='{}' but this process sees no CUDA device (a build "
            "without CUDA, or CUDA_VISIBLE_DEVICES hides them); use NNX_DEVICE=cpu", wanted);
  if (wanted == "cuda")
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank % device_count));
  const std::string index = wanted.substr(5);
  char* end = nullptr;
  const long n = std::strtol(index.c_str(), &end, 10);
  NNX_CHECK(!index.empty() && *end == '\0' && n >= 0 && n < device_count,
            "NNX_DEVICE='{}': this process sees CUDA devices 0..{}", wanted, device_count - 1);
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(n));
}

}  // namespace detail

}  // namespace nnx
