// The step of fused_step.h: a grid-stride loop over fixed-size chunks of up to kBatch parameters
// per launch, whose addresses and program travel as kernel arguments; each element runs the
// program's stages in order. Built with --fmad=false, so that every product and sum rounds on
// its own, as in the fused pass and in optax.
#include <nnx/optim/detail/cuda/fused_step.h>

#include <cuda_runtime.h>

#include <algorithm>

namespace nnx::optim::detail::cuda {

namespace {

constexpr int kBatch = 32;          // parameters per launch (the arguments stay under 4 KiB)
constexpr int64_t kChunk = 16384;   // elements a thread block takes at a time
constexpr int kThreads = 256;

struct Batch {
  StepBlocks blocks[kBatch];
  int64_t first_chunk[kBatch + 1];  // chunk index where parameter k starts; the last: the total
  int count;
};
static_assert(sizeof(Batch) + sizeof(StepProgram<double>) <= 4096, "kernel arguments too large");

__device__ inline float square_root(float x) { return sqrtf(x); }
__device__ inline double square_root(double x) { return sqrt(x); }

// Operation `op` on the update u of element j (p: the parameter's value there).
template <class T>
__device__ inline T apply(const StepOp<T>& op, const StepBlocks& b, int64_t j, T u, T p) {
  const T* s = op.s;
  switch (op.kind) {
    case StepKind::scale:
      return u * s[0];
    case StepKind::trace:
    case StepKind::nesterov_trace: {
      T* t = static_cast<T*>(b.slots[op.slot]);
      const T next = u + s[0] * t[j];
      t[j] = next;
      return op.kind == StepKind::nesterov_trace ? u + s[0] * next : next;
    }
    case StepKind::adam: {
      T* mu = static_cast<T*>(b.slots[op.slot]);
      T* nu = static_cast<T*>(b.slots[op.slot + 1]);
      const T m = s[0] * u + s[1] * mu[j];
      const T v = s[2] * (u * u) + s[3] * nu[j];
      mu[j] = m;
      nu[j] = v;
      return (m * s[4]) / (square_root(v * s[5] + s[6]) + s[7]);
    }
    case StepKind::rms: {
      T* nu = static_cast<T*>(b.slots[op.slot]);
      const T v = s[0] * (u * u) + s[1] * nu[j];
      nu[j] = v;
      return u * (T(1) / square_root(v + s[2]));
    }
    case StepKind::lion: {
      T* mu = static_cast<T*>(b.slots[op.slot]);
      const T m = mu[j];
      const T mix = s[0] * u + s[1] * m;
      mu[j] = s[2] * u + s[3] * m;
      return static_cast<T>((mix > T(0)) - (mix < T(0)));
    }
    case StepKind::decay:
      return u + s[0] * p;
    case StepKind::clip:
      return u / s[0] * s[1];
  }
  return u;
}

template <class T> __global__ void step_kernel(const Batch batch, const StepProgram<T> program) {
  const int64_t chunks = batch.first_chunk[batch.count];
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    int k = 0;
    while (batch.first_chunk[k + 1] <= chunk) ++k;
    const StepBlocks& b = batch.blocks[k];
    T* p = static_cast<T*>(b.param);
    const T* g = static_cast<const T*>(b.gradient);
    const int64_t begin = (chunk - batch.first_chunk[k]) * kChunk;
    const int64_t end = begin + kChunk < b.numel ? begin + kChunk : b.numel;
    for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
      const T value = p[j];
      T u = g[j];
      for (int op = 0; op < program.count; ++op)
        if (!(b.skipped >> op & 1u)) u = apply(program.ops[op], b, j, u, value);
      p[j] = value + u;
    }
  }
}

}  // namespace

template <class T>
const char* enqueue_fused_step(const StepBlocks* blocks, size_t count, const StepProgram<T>& program,
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
    step_kernel<T><<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(batch, program);
    status = cudaGetLastError();
    if (status != cudaSuccess) return cudaGetErrorString(status);
  }
  return nullptr;
}

template const char* enqueue_fused_step<float>(const StepBlocks*, size_t,
                                               const StepProgram<float>&, void*);
template const char* enqueue_fused_step<double>(const StepBlocks*, size_t,
                                                const StepProgram<double>&, void*);

}  // namespace nnx::optim::detail::cuda
