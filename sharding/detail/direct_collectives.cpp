#include <nnx/sharding/detail/direct_collectives.h>

#include <nnx/core/error.h>
#include <nnx/sharding/detail/combine.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

namespace nnx::detail {

namespace {

std::atomic<int64_t> direct_runs{0};
std::atomic<int> reads_before_failure{-1};  // -1: none fails

// What members post after their reads (at sequence + 1, and + 2 in an all-reduce): all done, or
// some read failed.
constexpr uint64_t kDone = 0x446f6e65ull << 32;
constexpr uint64_t kFailed = 0x4661696cull << 32;

// A refused read: which member, and the kernel's reason.
struct Refusal {
  int member;
  int error;
};

// Copies `bytes` from `remote` in member `member` into `local`; the first refusal is kept.
void read_member(const DirectCall& call, int member, const void* remote, void* local,
                 size_t bytes, std::optional<Refusal>& refused) {
  if (refused || bytes == 0) return;
  if (reads_before_failure.load() >= 0 && reads_before_failure.fetch_sub(1) == 0) {
    refused = Refusal{member, EPERM};
    return;
  }
  if (!call.board.read(member, remote, local, bytes)) refused = Refusal{member, errno};
}

// Posts that this member is done with the reads that end at `sequence + step`, waits for all,
// and throws on every member if any member's read failed.
void finish(const DirectCall& call, const std::optional<Refusal>& refused, uint64_t step = 1) {
  if (step == 1) ++direct_runs;  // every direct collective finishes its first reads here
  const bool same = call.board.agree(call.sequence + step, refused ? kFailed : kDone, call.comm,
                                     call.op, call.comm_name);
  if (same && !refused) return;  // members that all failed agree too
  const std::string what =
      refused ? fmt::format("this rank could not read member {}'s input ({})", refused->member,
                            std::strerror(refused->error))
              : std::string("another member could not read an input");
  throw_error(call.op, fmt::format("reading the members' inputs directly over '{}' failed: {}; "
                                   "the output is incomplete. Set NNX_DIRECT_COLLECTIVE_BYTES=0 "
                                   "to move such collectives through MPI",
                                   call.comm_name, what));
}

// Reductions read the members' inputs in blocks of this many bytes, so that each block is added
// while it is still in cache.
constexpr size_t kBlockBytes = 128 << 10;

// out = the member-order combination of the `numel` elements at byte `offset` in every member's
// input (`own` is this member's). `out` may be this member's own chunk (an all-reduce's sum
// replaces it): member 0 then sums in place, the others sum each block aside and copy it over.
void reduce_in_blocks(const DirectCall& call, const char* own, size_t offset, char* out,
                      int64_t numel, at::ScalarType dtype, ReduceOp op,
                      std::optional<Refusal>& refused) {
  thread_local std::vector<char> scratch(2 * kBlockBytes);  // a member's block, and a sum
  char* incoming = scratch.data();
  char* held = scratch.data() + kBlockBytes;
  const size_t element = c10::elementSize(dtype);
  const auto block = static_cast<int64_t>(std::max<size_t>(1, kBlockBytes / element));
  const bool sum_aside = out == own + offset && call.me != 0;
  for (int64_t first = 0; first < numel && !refused; first += block) {
    const int64_t n = std::min(block, numel - first);
    const size_t at = offset + static_cast<size_t>(first) * element;
    const size_t bytes = static_cast<size_t>(n) * element;
    char* sum = sum_aside ? held : out + (at - offset);
    for (int m = 0; m < call.members; ++m) {
      const char* from = own + at;
      if (m != call.me) {
        char* into = m == 0 ? sum : incoming;
        const auto* theirs = static_cast<const char*>(call.board.address(m, call.sequence));
        read_member(call, m, theirs + at, into, bytes, refused);
        from = into;
      }
      if (refused) break;
      if (m == 0) {
        if (from != sum) std::memcpy(sum, from, bytes);
      } else {
        combine(sum, from, n, dtype, op, call.op);
      }
    }
    if (sum_aside && !refused) std::memcpy(out + (at - offset), sum, bytes);
  }
}

// Members read in turn from the one after them, so they do not all read member 0 first.
template <class Read>
void each_other_member(const DirectCall& call, Read read) {
  for (int step = 1; step < call.members; ++step) read((call.me + step) % call.members);
}

}  // namespace

int64_t direct_collectives_run() { return direct_runs.load(); }

void fail_direct_read(int after) { reads_before_failure = after; }

void direct_all_gather(const DirectCall& call, const void* mine, void* out, size_t bytes) {
  std::optional<Refusal> refused;
  auto* to = static_cast<char*>(out);
  each_other_member(call, [&](int m) {
    read_member(call, m, call.board.address(m, call.sequence), to + m * bytes, bytes, refused);
  });
  if (bytes > 0) std::memcpy(to + call.me * bytes, mine, bytes);
  finish(call, refused);
}

void direct_all_to_all(const DirectCall& call, const void* mine, void* out, size_t chunk_bytes) {
  std::optional<Refusal> refused;
  auto* to = static_cast<char*>(out);
  const size_t my_chunk = static_cast<size_t>(call.me) * chunk_bytes;
  each_other_member(call, [&](int m) {
    const auto* theirs = static_cast<const char*>(call.board.address(m, call.sequence));
    read_member(call, m, theirs + my_chunk, to + m * chunk_bytes, chunk_bytes, refused);
  });
  if (chunk_bytes > 0)
    std::memcpy(to + my_chunk, static_cast<const char*>(mine) + my_chunk, chunk_bytes);
  finish(call, refused);
}

void direct_reduce_scatter(const DirectCall& call, const void* mine, void* out, int64_t numel,
                           at::ScalarType dtype) {
  check_combinable(dtype, call.op);
  std::optional<Refusal> refused;
  const size_t my_chunk = static_cast<size_t>(call.me * numel) * c10::elementSize(dtype);
  reduce_in_blocks(call, static_cast<const char*>(mine), my_chunk, static_cast<char*>(out), numel,
                   dtype, ReduceOp::sum, refused);
  finish(call, refused);
}

void direct_all_reduce(const DirectCall& call, void* buffer, int64_t numel, at::ScalarType dtype,
                       ReduceOp op) {
  check_combinable(dtype, call.op);
  auto* data = static_cast<char*>(buffer);
  const size_t element = c10::elementSize(dtype);
  auto first_of = [&](int chunk) { return numel * chunk / call.members; };
  auto offset_of = [&](int chunk) { return static_cast<size_t>(first_of(chunk)) * element; };
  std::optional<Refusal> refused;
  reduce_in_blocks(call, data, offset_of(call.me), data + offset_of(call.me),
                   first_of(call.me + 1) - first_of(call.me), dtype, op, refused);
  finish(call, refused, 1);
  // Every member's chunk now holds its sum; each reads the others' sums into place.
  each_other_member(call, [&](int m) {
    const auto* theirs = static_cast<const char*>(call.board.address(m, call.sequence));
    read_member(call, m, theirs + offset_of(m), data + offset_of(m),
                offset_of(m + 1) - offset_of(m), refused);
  });
  finish(call, refused, 2);
}

void direct_broadcast(const DirectCall& call, int root, void* out, size_t bytes) {
  std::optional<Refusal> refused;
  if (call.me != root)
    read_member(call, root, call.board.address(root, call.sequence), out, bytes, refused);
  finish(call, refused);
}

}  // namespace nnx::detail
