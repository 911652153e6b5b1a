// The step of fused_step.h: a grid-stride loop over fixed-size chunks of up to kBatch parameters
// per launch, whose addresses and program travel as kernel arguments; each element runs the
// program's stages in order, each thread on kLanes elements at once. Built with --fmad=false, so that every product and sum rounds on
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

// Each thread takes kLanes elements kThreads apart (coalesced loads, kLanes of them in flight).
constexpr int kLanes = 4;

// Operation `op` on the updates u of the elements at[0..kLanes) (those with live[e]; p: the
// parameter's values there). Every slot value is loaded before any is computed or stored.
template <class T>
__device__ inline void apply(const StepOp<T>& op, const StepBlocks& b, const int64_t (&at)[kLanes],
                             const bool (&live)[kLanes], T (&u)[kLanes], const T (&p)[kLanes]) {
  const T* s = op.s;
  T* first = op.kind == StepKind::scale || op.kind == StepKind::decay || op.kind == StepKind::clip
                 ? nullptr
                 : static_cast<T*>(b.slots[op.slot]);
  T* second = op.kind == StepKind::adam ? static_cast<T*>(b.slots[op.slot + 1]) : nullptr;
  T a[kLanes], c[kLanes];
#pragma unroll
  for (int e = 0; e < kLanes; ++e) {
    a[e] = first != nullptr && live[e] ? first[at[e]] : T(0);
    c[e] = second != nullptr && live[e] ? second[at[e]] : T(0);
  }
#pragma unroll
  for (int e = 0; e < kLanes; ++e) {
    switch (op.kind) {
      case StepKind::scale:
        u[e] = u[e] * s[0];
        break;
      case StepKind::trace:
      case StepKind::nesterov_trace: {
        const T next = u[e] + s[0] * a[e];
        a[e] = next;
        u[e] = op.kind == StepKind::nesterov_trace ? u[e] + s[0] * next : next;
        break;
      }
      case StepKind::adam: {
        const T m = s[0] * u[e] + s[1] * a[e];
        const T v = s[2] * (u[e] * u[e]) + s[3] * c[e];
        a[e] = m;
        c[e] = v;
        u[e] = (m * s[4]) / (square_root(v * s[5] + s[6]) + s[7]);
        break;
      }
      case StepKind::rms: {
        const T v = s[0] * (u[e] * u[e]) + s[1] * a[e];
        a[e] = v;
        u[e] = u[e] * (T(1) / square_root(v + s[2]));
        break;
      }
      case StepKind::lion: {
        const T m = a[e];
        const T mix = s[0] * u[e] + s[1] * m;
        a[e] = s[2] * u[e] + s[3] * m;
        u[e] = static_cast<T>((mix > T(0)) - (mix < T(0)));
        break;
      }
      case StepKind::decay:
        u[e] = u[e] + s[0] * p[e];
        break;
      case StepKind::clip:
        u[e] = u[e] / s[0] * s[1];
        break;
    }
  }
#pragma unroll
  for (int e = 0; e < kLanes; ++e) {
    if (first != nullptr && live[e]) first[at[e]] = a[e];
    if (second != nullptr && live[e]) second[at[e]] = c[e];
  }
}

template <class T> __global__ void step_kernel(const Batch batch, const StepProgram<T> program) {
  const int64_t chunks = batch.first_chunk[batch.count];
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    int k = 0;
    while (batch.first_chunk[k + 1] <= chunk) ++k;
    const StepBlocks& b = batch.blocks[k];
    T* param = static_cast<T*>(b.param);
    const T* gradient = static_cast<const T*>(b.gradient);
    const int64_t begin = (chunk - batch.first_chunk[k]) * kChunk;
    const int64_t end = begin + kChunk < b.numel ? begin + kChunk : b.numel;
    for (int64_t base = begin + threadIdx.x; base < end; base += int64_t{blockDim.x} * kLanes) {
      int64_t at[kLanes];
      bool live[kLanes];
      T p[kLanes], u[kLanes];
#pragma unroll
      for (int e = 0; e < kLanes; ++e) {
        at[e] = base + int64_t{e} * blockDim.x;
        live[e] = at[e] < end;
        p[e] = live[e] ? param[at[e]] : T(0);
        u[e] = live[e] ? gradient[at[e]] : T(0);
      }
      for (int op = 0; op < program.count; ++op)
        if (!(b.skipped >> op & 1u)) apply(program.ops[op], b, at, live, u, p);
#pragma unroll
      for (int e = 0; e < kLanes; ++e)
        if (live[e]) param[at[e]] = p[e] + u[e];
    }
  }
}

}  // namespace

const char* pending_error() {
  const cudaError_t status = cudaGetLastError();
  return status == cudaSuccess ? nullptr : cudaGetErrorString(status);
}

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
