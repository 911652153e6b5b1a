// The step of fused_step.h: a grid-stride loop over fixed-size chunks of up to kBatch parameters
// per launch, whose addresses and program travel as kernel arguments; each element runs the
// program's stages in order, each thread on kLanes consecutive elements at once. Built with
// --fmad=false, so that every product and sum rounds on its own, as in the fused pass and optax.
// bfloat16 and float16 blocks are widened to float and each result rounded back, as there.
#include <nnx/optim/detail/cuda/fused_step.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

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

// Blocks stored as bfloat16 or float16, by their bits.
struct Bfloat16 {
  uint16_t bits;
};
struct Float16 {
  uint16_t bits;
};

// Storage S: widened to float, rounded to S's precision, narrowed to its bits (to nearest even,
// by the hardware's conversions; a NaN's bits may differ from the CPU's). Float and double: as is.
template <class S> struct Stored {
  __device__ static S widen(S x) { return x; }
  __device__ static S round(S x) { return x; }
  __device__ static S narrow(S x) { return x; }
};
template <> struct Stored<Bfloat16> {
  __device__ static float widen(Bfloat16 x) { return __uint_as_float(uint32_t{x.bits} << 16); }
  __device__ static float round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
  __device__ static Bfloat16 narrow(float rounded) {
    return {static_cast<uint16_t>(__float_as_uint(rounded) >> 16)};
  }
};
template <> struct Stored<Float16> {
  __device__ static float widen(Float16 x) { return __half2float(__ushort_as_half(x.bits)); }
  __device__ static float round(float x) { return __half2float(__float2half_rn(x)); }
  __device__ static Float16 narrow(float rounded) {
    return {__half_as_ushort(__float2half_rn(rounded))};
  }
};

// Each thread takes kLanes consecutive elements at a time: two 16-byte accesses per array for
// float, four for double, one for bfloat16 and float16, where the array's blocks are 16-byte
// aligned. On an H200 a float step ran 1.15-1.5x as fast as with four elements 256 apart; 16
// lanes were slower than 8. Sharing the kernel with the unaligned layout (runtime stride, lane
// count) since cost 5-9%.
constexpr int kLanes = 8;
static_assert(kChunk % (kThreads * kLanes) == 0, "a thread's lanes must not straddle two chunks");
// Float registers capped so that four blocks fit on a multiprocessor (a few bytes spill); the
// double kernel would spill heavily under that cap, so it takes what it needs.
template <class T> constexpr int kBlocksPerProcessor = sizeof(T) == 4 ? 4 : 1;

template <class T> struct alignas(sizeof(T) * kLanes < 16 ? sizeof(T) * kLanes : 16) Lanes {
  T v[kLanes];
};

// Where a thread's lanes lie: lane e at `at + e * stride`, the first `live` of them in the
// block; `whole`: all kLanes consecutive (stride 1) and aligned, taken as 16-byte accesses. A
// block with an unaligned array (a gradient viewed at an odd offset of a bucket, say) has its
// lanes kThreads apart instead, so that a warp's accesses stay coalesced.
struct Span {
  int64_t at;
  int64_t stride;
  int live;
  bool whole;
};

// The span's elements of `from`, as stored (lanes past `live` are zero).
template <class S> __device__ inline Lanes<S> load_stored(const S* from, const Span& span) {
  if (span.whole) return *reinterpret_cast<const Lanes<S>*>(from + span.at);
  Lanes<S> out;
#pragma unroll
  for (int e = 0; e < kLanes; ++e)
    out.v[e] = e < span.live ? from[span.at + e * span.stride] : S{};
  return out;
}

template <class T, class S> __device__ inline Lanes<T> load(const S* from, const Span& span) {
  const Lanes<S> stored = load_stored(from, span);
  Lanes<T> out;
#pragma unroll
  for (int e = 0; e < kLanes; ++e) out.v[e] = Stored<S>::widen(stored.v[e]);
  return out;
}

// `values`, already rounded to S, stored as S.
template <class T, class S>
__device__ inline void store(S* to, const Span& span, const Lanes<T>& values) {
  Lanes<S> out;
#pragma unroll
  for (int e = 0; e < kLanes; ++e) out.v[e] = Stored<S>::narrow(values.v[e]);
  if (span.whole) {
    *reinterpret_cast<Lanes<S>*>(to + span.at) = out;
    return;
  }
#pragma unroll
  for (int e = 0; e < kLanes; ++e)
    if (e < span.live) to[span.at + e * span.stride] = out.v[e];
}

// Operation `op` on the updates u of the span's elements (p: the parameter's values there),
// computed in T on blocks stored as S, each result rounded to S (r). Every slot value is loaded
// before any is computed or stored.
template <class T, class S>
__device__ inline void apply(const StepOp<T>& op, const StepBlocks& b, const Span& span,
                             Lanes<T>& u, const Lanes<T>& p) {
  const auto r = [](T x) { return Stored<S>::round(x); };
  const T* s = op.s;
  S* first = op.kind == StepKind::scale || op.kind == StepKind::decay || op.kind == StepKind::clip
                 ? nullptr
                 : static_cast<S*>(b.slots[op.slot]);
  S* second = op.kind == StepKind::adam ? static_cast<S*>(b.slots[op.slot + 1]) : nullptr;
  Lanes<T> a{}, c{};
  if (first != nullptr) a = load<T>(first, span);
  if (second != nullptr) c = load<T>(second, span);
#pragma unroll
  for (int e = 0; e < kLanes; ++e) {
    T& ue = u.v[e];
    T& ae = a.v[e];
    T& ce = c.v[e];
    switch (op.kind) {
      case StepKind::scale:
        ue = r(ue * s[0]);
        break;
      case StepKind::trace:
      case StepKind::nesterov_trace: {
        const T next = r(ue + r(s[0] * ae));
        ae = next;
        ue = op.kind == StepKind::nesterov_trace ? r(ue + r(s[0] * next)) : next;
        break;
      }
      case StepKind::adam: {
        const T m = r(r(s[0] * ue) + r(s[1] * ae));
        const T v = r(r(s[2] * r(ue * ue)) + r(s[3] * ce));
        ae = m;
        ce = v;
        // Bias-corrected as the fused pass corrects: bfloat16 divides by the correction.
        T m_hat, v_hat;
        if constexpr (std::is_same_v<S, Bfloat16>) {
          m_hat = r(m / s[4]);
          v_hat = r(v / s[5]);
        } else {
          m_hat = r(m * s[4]);
          v_hat = r(v * s[5]);
        }
        ue = r(m_hat / r(r(square_root(r(v_hat + s[6]))) + s[7]));
        break;
      }
      case StepKind::rms: {
        const T v = r(r(s[0] * r(ue * ue)) + r(s[1] * ae));
        ae = v;
        ue = r(ue * r(T(1) / square_root(r(v + s[2]))));
        break;
      }
      case StepKind::lion: {
        const T m = ae;
        const T mix = r(r(s[0] * ue) + r(s[1] * m));
        ae = r(r(s[2] * ue) + r(s[3] * m));
        ue = static_cast<T>((mix > T(0)) - (mix < T(0)));
        break;
      }
      case StepKind::decay:
        ue = r(ue + r(s[0] * p.v[e]));
        break;
      case StepKind::clip:
        ue = r(r(ue / s[0]) * s[1]);
        break;
    }
  }
  if (first != nullptr) store(first, span, a);
  if (second != nullptr) store(second, span, c);
}

__device__ inline bool aligned16(const StepBlocks& b) {
  uintptr_t bits = reinterpret_cast<uintptr_t>(b.param) | reinterpret_cast<uintptr_t>(b.gradient) |
                   reinterpret_cast<uintptr_t>(b.out);
  for (void* slot : b.slots) bits |= reinterpret_cast<uintptr_t>(slot);
  return bits % 16 == 0;
}

template <class T, class S>
__global__ void __launch_bounds__(kThreads, kBlocksPerProcessor<T>)
    step_kernel(const Batch batch, const StepProgram<T> program) {
  const int64_t chunks = batch.first_chunk[batch.count];
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    int k = 0;
    while (batch.first_chunk[k + 1] <= chunk) ++k;
    const StepBlocks& b = batch.blocks[k];
    S* param = static_cast<S*>(b.param);
    const S* gradient = static_cast<const S*>(b.gradient);
    const bool aligned = aligned16(b);
    const int64_t begin = (chunk - batch.first_chunk[k]) * kChunk;
    const int64_t end = begin + kChunk < b.numel ? begin + kChunk : b.numel;
    // Aligned: kLanes consecutive elements per thread; else kLanes elements blockDim apart.
    const int64_t first = aligned ? int64_t{threadIdx.x} * kLanes : int64_t{threadIdx.x};
    const int64_t stride = aligned ? 1 : int64_t{blockDim.x};
    for (int64_t at = begin + first; at < end; at += int64_t{blockDim.x} * kLanes) {
      const int64_t left = (end - at + stride - 1) / stride;  // lanes inside the block
      const int live = left < kLanes ? static_cast<int>(left) : kLanes;
      const Span span{at, stride, live, aligned && live == kLanes};
      Lanes<T> p = load<T>(param, span);
      Lanes<T> u = load<T>(gradient, span);
      for (int op = 0; op < program.count; ++op)
        if (!(b.skipped >> op & 1u)) apply<T, S>(program.ops[op], b, span, u, p);
      if (b.out != b.param) {  // ZeRO: the slice's update alone
        store(static_cast<S*>(b.out), span, u);
        continue;
      }
#pragma unroll
      for (int e = 0; e < kLanes; ++e) u.v[e] = Stored<S>::round(p.v[e] + u.v[e]);
      store(param, span, u);
    }
  }
}

template <class T, class S>
void launch(int grid, cudaStream_t stream, const Batch& batch, const StepProgram<T>& program) {
  step_kernel<T, S><<<grid, kThreads, 0, stream>>>(batch, program);
}

}  // namespace

const char* pending_error() {
  const cudaError_t status = cudaGetLastError();
  return status == cudaSuccess ? nullptr : cudaGetErrorString(status);
}

template <class T>
const char* enqueue_fused_step(const StepBlocks* blocks, size_t count, const StepProgram<T>& program,
                               Storage storage, void* stream) {
  if constexpr (!std::is_same_v<T, float>)
    if (storage != Storage::computed) return "bfloat16 and float16 blocks take the float kernel";
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
    const auto on = static_cast<cudaStream_t>(stream);
    if constexpr (std::is_same_v<T, float>) {
      if (storage == Storage::bfloat16) launch<T, Bfloat16>(grid, on, batch, program);
      else if (storage == Storage::float16) launch<T, Float16>(grid, on, batch, program);
      else launch<T, T>(grid, on, batch, program);
    } else {
      launch<T, T>(grid, on, batch, program);
    }
    status = cudaGetLastError();
    if (status != cudaSuccess) return cudaGetErrorString(status);
  }
  return nullptr;
}

template const char* enqueue_fused_step<float>(const StepBlocks*, size_t,
                                               const StepProgram<float>&, Storage, void*);
template const char* enqueue_fused_step<double>(const StepBlocks*, size_t,
                                                const StepProgram<double>&, Storage, void*);

}  // namespace nnx::optim::detail::cuda
