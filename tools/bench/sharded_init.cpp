// Peak memory of sharded initialization: a stack of Linear layers with about `gib` GiB of
// float32 kernels, column-sharded over every rank, built under a MeshContext.
// Run: mpirun -np 8 bench_sharded_init [gib=4] [layers=16]. Prints one JSON line per rank:
// its parameter share, peak RSS before and after creation, and the seconds it took; on a GPU
// mesh also the device's peak allocated bytes over that share.
#include <nnx/nnx.h>

#include <fmt/format.h>
#include <sys/resource.h>
#include <torch/cuda.h>

#ifdef NNX_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

namespace {

double peak_rss_gib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / (1 << 20);  // ru_maxrss is in KiB on Linux
}

// Peak bytes the caching allocator handed out on `device` in this process (0 off CUDA).
double peak_device_gib(c10::Device device) {
#ifdef NNX_WITH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return static_cast<double>(stats.allocated_bytes[0].peak) / (1LL << 30);  // 0: all pools
  }
#endif
  return 0;
}

struct Stack : nnx::Module {
  Stack(int64_t layers, int64_t width, nnx::Rngs& rngs) {
    for (int64_t i = 0; i < layers; ++i)
      blocks.emplace_back(width, width, rngs,
                          nnx::LinearOptions{.use_bias = false,
                                             .kernel_metadata = {.out_sharding =
                                                                     nnx::P(nnx::none, "model")}});
  }
  std::vector<nnx::Linear> NNX_FIELD(blocks);
};

}  // namespace

int main(int argc, char** argv) {
  const double gib = argc > 1 ? std::stod(argv[1]) : 4.0;
  const int64_t layers = argc > 2 ? std::stoll(argv[2]) : 16;
  auto world = nnx::Communicator::world();
  const int64_t ranks = world.size();
  // Width: layers * width^2 * 4 bytes ~ gib, rounded to a multiple of 8 * ranks.
  const double elems = gib * (1LL << 30) / 4 / static_cast<double>(layers);
  const int64_t step = 8 * ranks;
  const int64_t width = std::max<int64_t>(step, std::llround(std::sqrt(elems) / step) * step);
  auto mesh = nnx::make_mesh({ranks}, {"model"});
  const double before = peak_rss_gib();
  auto t0 = std::chrono::steady_clock::now();
  nnx::MeshContext on(mesh);
  nnx::Rngs rngs(0);
  Stack model(layers, width, rngs);
  if (mesh->device().is_cuda()) torch::cuda::synchronize();
  world.barrier();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto params = nnx::state(model);
  int64_t local_bytes = 0;
  for (const auto& [path, v] : params) local_bytes += v.tensor().numel() * v.tensor().element_size();
  const double total_gib = static_cast<double>(params.nbytes()) / (1LL << 30);
  const double share_gib = static_cast<double>(local_bytes) / (1LL << 30);
  const double after = peak_rss_gib();
  const double device_gib = peak_device_gib(mesh->device());
  fmt::print(
      "{{\"bench\": \"sharded_init\", \"rank\": {}, \"ranks\": {}, \"layers\": {}, \"width\": {}, "
      "\"params_gib\": {:.3f}, \"local_share_gib\": {:.3f}, \"peak_rss_before_gib\": {:.3f}, "
      "\"peak_rss_after_gib\": {:.3f}, \"peak_rss_over_share\": {:.3f}, \"device\": \"{}\", "
      "\"peak_device_gib\": {:.3f}, \"peak_device_over_share\": {:.3f}, \"seconds\": {:.2f}}}\n",
      world.rank(), ranks, layers, width, total_gib, share_gib, before, after,
      (after - before) / share_gib, mesh->device().str(), device_gib, device_gib / share_gib,
      seconds);
  return 0;
}
