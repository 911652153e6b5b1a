#include <nnx/sharding/detail/board_collectives.h>

#include <nnx/sharding/detail/combine.h>

#include <atomic>
#include <cstring>

namespace nnx::detail {

namespace {

std::atomic<int64_t> board_runs{0};

// out = chunk `chunk` of every member's input, combined in member order.
void reduce_members(const char* who, const FingerprintBoard& board, uint64_t sequence,
                    int members, int64_t chunk, void* out, int64_t n, at::ScalarType dtype,
                    ReduceOp op) {
  check_combinable(dtype, who);
  if (n == 0) return;
  const size_t bytes = static_cast<size_t>(n) * c10::elementSize(dtype);
  auto input = [&](int m) {
    return static_cast<const char*>(board.region(m, sequence)) + chunk * bytes;
  };
  if (members == 1) return static_cast<void>(std::memcpy(out, input(0), bytes));
  combine_members(out, members, input, n, dtype, op, who);
}

}  // namespace

int64_t board_collectives_run() { return board_runs.load(); }

void board_all_reduce(const FingerprintBoard& board, uint64_t sequence, int members, void* out,
                      int64_t numel, at::ScalarType dtype, ReduceOp op) {
  ++board_runs;
  reduce_members("all_reduce", board, sequence, members, 0, out, numel, dtype, op);
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
  reduce_members("reduce_scatter", board, sequence, members, me, out, numel, dtype,
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
