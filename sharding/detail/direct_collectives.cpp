#include <nnx/sharding/detail/direct_collectives.h>

#include <nnx/core/error.h>
#include <nnx/sharding/detail/combine.h>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

namespace nnx::detail {

namespace {

std::atomic<int64_t> direct_runs{0};
std::atomic<bool> fail_next{false};

// What members post at sequence + 1: all done, or some read failed.
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
  if (fail_next.exchange(false)) {
    refused = Refusal{member, EPERM};
    return;
  }
  if (!call.board.read(member, remote, local, bytes)) refused = Refusal{member, errno};
}

// Posts that this member is done reading, waits for all, and throws on every member if any
// member's read failed.
void finish(const DirectCall& call, const std::optional<Refusal>& refused) {
  ++direct_runs;
  const bool all_done =
      call.board.agree(call.sequence + 1, refused ? kFailed : kDone, call.comm, call.op,
                       call.comm_name);
  if (all_done) return;
  const std::string what =
      refused ? fmt::format("this rank could not read member {}'s input ({})", refused->member,
                            std::strerror(refused->error))
              : std::string("another member could not read an input");
  throw_error(call.op, fmt::format("reading the members' inputs directly over '{}' failed: {}; "
                                   "the output is incomplete. Set NNX_DIRECT_COLLECTIVE_BYTES=0 "
                                   "to move such collectives through MPI",
                                   call.comm_name, what));
}

// Members read in turn from the one after them, so they do not all read member 0 first.
template <class Read>
void each_other_member(const DirectCall& call, Read read) {
  for (int step = 1; step < call.members; ++step) read((call.me + step) % call.members);
}

}  // namespace

int64_t direct_collectives_run() { return direct_runs.load(); }

void fail_next_direct_read() { fail_next = true; }

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
  std::optional<Refusal> refused;
  const bool known = combinable(dtype);
  const size_t bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  // Member 0's chunk lands in out, each later one in `scratch` (kept, grown) and is added there.
  thread_local std::vector<char> scratch;
  if (known && bytes > 0) {
    if (scratch.size() < bytes) scratch.resize(bytes);
    const size_t my_chunk = static_cast<size_t>(call.me) * bytes;
    for (int m = 0; m < call.members && !refused; ++m) {
      const void* chunk = static_cast<const char*>(mine) + my_chunk;
      if (m != call.me) {
        void* to = m == 0 ? out : scratch.data();
        const auto* theirs = static_cast<const char*>(call.board.address(m, call.sequence));
        read_member(call, m, theirs + my_chunk, to, bytes, refused);
        chunk = to;
      }
      if (m == 0) {
        if (chunk != out) std::memcpy(out, chunk, bytes);
      } else if (!refused) {
        combine(out, chunk, numel, dtype, ReduceOp::sum, call.op);
      }
    }
  }
  finish(call, refused);  // every member reaches it, so that none leaves while others read
  check_combinable(dtype, call.op);
}

void direct_broadcast(const DirectCall& call, int root, void* out, size_t bytes) {
  std::optional<Refusal> refused;
  if (call.me != root)
    read_member(call, root, call.board.address(root, call.sequence), out, bytes, refused);
  finish(call, refused);
}

}  // namespace nnx::detail
