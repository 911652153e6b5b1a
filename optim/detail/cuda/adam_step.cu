// The Adam step of adam_step.h: a grid-stride loop over fixed-size chunks of up to kBatch
// parameters per launch, whose addresses travel as kernel arguments. Built with --fmad=false, so
// that every product and sum rounds on its own, as in the fused pass and in optax.
#include <nnx/optim/detail/cuda/adam_step.h>

#include <cuda_runtime.h>

#include <algorithm>

namespace nnx::optim::detail::cuda {

namespace {

constexpr int kBatch = 40;          // parameters per launch (the arguments stay under 4 KiB)
constexpr int64_t kChunk = 16384;   // elements a thread block takes at a time
constexpr int kThreads = 256;

struct Batch {
  AdamBlocks blocks[kBatch];
  int64_t first_chunk[kBatch + 1];  // chunk index where parameter k starts; the last: the total
  int count;
};

__device__ inline float square_root(float x) { return sqrtf(x); }
__device__ inline double square_root(double x) { return sqrt(x); }

template <class T> __global__ void adam_kernel(const Batch batch, const AdamScalars<T> s) {
  const int64_t chunks = batch.first_chunk[batch.count];
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    int k = 0;
    while (batch.first_chunk[k + 1] <= chunk) ++k;
    const AdamBlocks& b = batch.blocks[k];
    T* p = static_cast<T*>(b.param);
    const T* g = static_cast<const T*>(b.gradient);
    T* mu = static_cast<T*>(b.mu);
    T* nu = static_cast<T*>(b.nu);
    const int64_t begin = (chunk - batch.first_chunk[k]) * kChunk;
    const int64_t end = begin + kChunk < b.numel ? begin + kChunk : b.numel;
    for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
      const T grad = g[j];
      const T m = s.one_minus_b1 * grad + s.b1 * mu[j];
      const T v = s.one_minus_b2 * (grad * grad) + s.b2 * nu[j];
      mu[j] = m;
      nu[j] = v;
      T u = (m * s.bias_reciprocal1) / (square_root(v * s.bias_reciprocal2) + s.eps);
      if (b.decayed) u = u + s.weight_decay * p[j];
      u = u * s.scale;
      p[j] = p[j] + u;
    }
  }
}

}  // namespace

template <class T>
const char* enqueue_adam_step(const AdamBlocks* blocks, size_t count, const AdamScalars<T>& s,
                              void* stream) {
  int device = 0, processors = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess)
    status = cudaDeviceGetAttribute(&processors, cudaDevAttrMultiProcessorCount, device);
  if (status != cudaSuccess) return cudaGetErrorString(status);
  for (size_t first = 0; first < count; first += kBatch) {
    Batch batch{};
    batch.count = static_cast<int>(std::min<size_t>(kBatch, count - first));
    for (int k = 0; k < batch.count; ++k) {
      batch.blocks[k] = blocks[first + k];
      const int64_t chunks = (blocks[first + k].numel + kChunk - 1) / kChunk;
      batch.first_chunk[k + 1] = batch.first_chunk[k] + chunks;
    }
    const int64_t chunks = batch.first_chunk[batch.count];
    if (chunks == 0) continue;
    const int grid = static_cast<int>(std::min<int64_t>(chunks, int64_t{processors} * 8));
    adam_kernel<T><<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(batch, s);
    status = cudaGetLastError();
    if (status != cudaSuccess) return cudaGetErrorString(status);
  }
  return nullptr;
}

template const char* enqueue_adam_step<float>(const AdamBlocks*, size_t, const AdamScalars<float>&,
                                              void*);
template const char* enqueue_adam_step<double>(const AdamBlocks*, size_t,
                                               const AdamScalars<double>&, void*);

}  // namespace nnx::optim::detail::cuda
