#include <nnx/sharding/detail/board_collectives.h>

#include <nnx/core/error.h>

#include <fmt/format.h>

#include <atomic>
#include <cstring>
#include <type_traits>

namespace nnx::detail {

namespace {

std::atomic<int64_t> board_runs{0};

// acc[i] = acc[i] op in[i]; max and min keep a NaN from either side. Integer sums wrap (as
// MPI's do), computed unsigned so that overflow is defined.
template <class T>
void combine(T* acc, const T* in, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      if constexpr (std::is_integral_v<T>) {
        using U = std::make_unsigned_t<T>;
        for (int64_t i = 0; i < n; ++i)
          acc[i] = static_cast<T>(static_cast<U>(acc[i]) + static_cast<U>(in[i]));
      } else {
        for (int64_t i = 0; i < n; ++i) acc[i] += in[i];
      }
      return;
    case ReduceOp::max:
      for (int64_t i = 0; i < n; ++i)
        if (in[i] > acc[i] || in[i] != in[i]) acc[i] = in[i];
      return;
    case ReduceOp::min:
      for (int64_t i = 0; i < n; ++i)
        if (in[i] < acc[i] || in[i] != in[i]) acc[i] = in[i];
      return;
  }
}

// out = chunk `chunk` of every member's input, combined in member order.
template <class T>
void reduce_members(const FingerprintBoard& board, uint64_t sequence, int members, int64_t chunk,
                    T* out, int64_t n, ReduceOp op) {
  if (n == 0) return;
  auto input = [&](int m) { return static_cast<const T*>(board.region(m, sequence)) + chunk * n; };
  std::memcpy(out, input(0), static_cast<size_t>(n) * sizeof(T));
  for (int m = 1; m < members; ++m) combine(out, input(m), n, op);
}

void reduce_dispatch(const char* who, const FingerprintBoard& board, uint64_t sequence,
                     int members, int64_t chunk, void* out, int64_t n, at::ScalarType dtype,
                     ReduceOp op) {
  switch (dtype) {
#define NNX_BOARD_REDUCE(scalar, type) \
  case scalar: return reduce_members(board, sequence, members, chunk, static_cast<type*>(out), n, op);
    NNX_BOARD_REDUCE(at::kFloat, float)
    NNX_BOARD_REDUCE(at::kDouble, double)
    NNX_BOARD_REDUCE(at::kLong, int64_t)
    NNX_BOARD_REDUCE(at::kInt, int32_t)
    NNX_BOARD_REDUCE(at::kShort, int16_t)
    NNX_BOARD_REDUCE(at::kChar, int8_t)
    NNX_BOARD_REDUCE(at::kByte, uint8_t)
#undef NNX_BOARD_REDUCE
    default:
      throw_error(who, fmt::format("no reduction for dtype {}", c10::toString(dtype)));
  }
}

}  // namespace

int64_t board_collectives_run() { return board_runs.load(); }

void board_all_reduce(const FingerprintBoard& board, uint64_t sequence, int members, void* out,
                      int64_t numel, at::ScalarType dtype, ReduceOp op) {
  ++board_runs;
  reduce_dispatch("all_reduce", board, sequence, members, 0, out, numel, dtype, op);
}

void board_all_gather(const FingerprintBoard& board, uint64_t sequence, int members, void* out,
                      size_t bytes) {
  ++board_runs;
  if (bytes == 0) return;
  for (int m = 0; m < members; ++m)
    std::memcpy(static_cast<char*>(out) + m * bytes, board.region(m, sequence), bytes);
}

void board_reduce_scatter(const FingerprintBoard& board, uint64_t sequence, int members, int me,
                          void* out, int64_t numel, at::ScalarType dtype) {
  ++board_runs;
  reduce_dispatch("reduce_scatter", board, sequence, members, me, out, numel, dtype,
                  ReduceOp::sum);
}

void board_all_to_all(const FingerprintBoard& board, uint64_t sequence, int members, int me,
                      void* out, size_t chunk_bytes) {
  ++board_runs;
  if (chunk_bytes == 0) return;
  for (int m = 0; m < members; ++m)
    std::memcpy(static_cast<char*>(out) + m * chunk_bytes,
                static_cast<const char*>(board.region(m, sequence)) + me * chunk_bytes,
                chunk_bytes);
}

void board_broadcast(const FingerprintBoard& board, uint64_t sequence, int root, int me,
                     void* out, size_t bytes) {
  ++board_runs;
  if (me != root && bytes > 0) std::memcpy(out, board.region(root, sequence), bytes);
}

}  // namespace nnx::detail
