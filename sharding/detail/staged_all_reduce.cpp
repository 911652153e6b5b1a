#include <nnx/sharding/detail/staged_all_reduce.h>

#include <nnx/sharding/detail/combine.h>

#include <algorithm>
#include <atomic>
#include <cstring>

namespace nnx::detail {

namespace {

std::atomic<int64_t> staged_runs{0};

// What every member posts when its chunk's sum is in the area.
constexpr uint64_t kChunkSummed = 0x53756d64ull << 32;

// Sums are added in blocks of this many bytes, so that each block stays in cache while every
// member's part of it is added.
constexpr size_t kStagedBlockBytes = 128 << 10;

// Bytes of each slot of `board`'s area for `members` members: whole cache lines. The slots
// do not depend on the call's size, so a call's input never lands on the last call's sums.
size_t slot_bytes(const FingerprintBoard& board, int members) {
  return board.staging_bytes() / (static_cast<size_t>(members) + 1) / 64 * 64;
}

// The first element of chunk `chunk` of `numel` elements shared by `members` members, and its
// byte offset for elements of `element` bytes.
int64_t first_of(int64_t numel, int members, int chunk) { return numel * chunk / members; }
size_t offset_of(int64_t numel, int members, int chunk, size_t element) {
  return static_cast<size_t>(first_of(numel, members, chunk)) * element;
}

}  // namespace

int64_t staged_all_reduces_run() { return staged_runs.load(); }

bool fits_staging(const FingerprintBoard& board, int members, size_t bytes) {
  return bytes > 0 && bytes <= slot_bytes(board, members);
}

void* staged_input(const FingerprintBoard& board, int members, int member) {
  return static_cast<char*>(board.staging()) +
         (1 + static_cast<size_t>(member)) * slot_bytes(board, members);
}

void stage_input(const FingerprintBoard& board, int members, int me, const void* data,
                 size_t bytes, size_t element_bytes) {
  const auto* from = static_cast<const char*>(data);
  auto* slot = static_cast<char*>(staged_input(board, members, me));
  const auto numel = static_cast<int64_t>(bytes / element_bytes);
  const size_t own_start = offset_of(numel, members, me, element_bytes);
  const size_t own_end = offset_of(numel, members, me + 1, element_bytes);
  std::memcpy(slot, from, own_start);
  std::memcpy(slot + own_end, from + own_end, bytes - own_end);
}

void staged_all_reduce(FingerprintBoard& board, uint64_t sequence, int members, int me,
                       void* buffer, int64_t numel, at::ScalarType dtype, ReduceOp op,
                       MPI_Comm comm, const std::string& comm_name) {
  check_combinable(dtype, "all_reduce");
  ++staged_runs;
  auto* data = static_cast<char*>(buffer);
  const size_t element = c10::elementSize(dtype);
  // This member's own chunk is read from its buffer: its slot holds the others' chunks alone.
  auto input_of = [&](int m) -> const char* {
    return m == me ? data : static_cast<const char*>(staged_input(board, members, m));
  };
  auto* sums = static_cast<char*>(board.staging());
  const auto block = static_cast<int64_t>(std::max<size_t>(1, kStagedBlockBytes / element));
  const int64_t last = first_of(numel, members, me + 1);
  for (int64_t start = first_of(numel, members, me); start < last; start += block) {
    const size_t at = static_cast<size_t>(start) * element;
    combine_members(sums + at, members, [&](int m) { return input_of(m) + at; },
                    std::min(block, last - start), dtype, op, "all_reduce");
  }
  board.agree(sequence + 1, kChunkSummed, comm, "all_reduce", comm_name);
  for (int step = 0; step < members; ++step) {
    const int m = (me + step) % members;
    const size_t at = offset_of(numel, members, m, element);
    std::memcpy(data + at, sums + at, offset_of(numel, members, m + 1, element) - at);
  }
}

}  // namespace nnx::detail
