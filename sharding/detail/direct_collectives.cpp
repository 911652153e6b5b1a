#include <nnx/sharding/detail/direct_collectives.h>

#include <nnx/core/error.h>
#include <nnx/sharding/detail/collective_wait.h>
#include <nnx/sharding/detail/combine.h>
#include <nnx/sharding/detail/exit_protocol.h>
#include <nnx/sharding/detail/sum_transfers.h>
#include <nnx/sharding/threads.h>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

namespace nnx::detail {

namespace {

std::atomic<int64_t> direct_runs{0};
std::atomic<int64_t> asked_reads{0};
std::atomic<int64_t> early_reads{0};
std::mutex written_mutex;
std::vector<int64_t> written_blocks;  // by the member written to
std::atomic<int> copies_before_failure{-1};  // -1: none fails
std::atomic<int> milliseconds_before_reads{0};

// What members post after an all-reduce's copies (at sequence + 1): all done, or some copy
// failed.
constexpr uint64_t kDone = 0x446f6e65ull << 32;
constexpr uint64_t kFailed = 0x4661696cull << 32;

// A read the kernel refuses is asked of the member instead: the request, then the bytes, go
// through MPI under these tags.
constexpr int kAskTag = 31101, kAnswerTag = 31102;
struct Ask {
  uint64_t sequence, offset, bytes;
};

// This member's input, as the others may ask for parts of it (null: nobody reads it).
struct Input {
  const void* data;
  size_t bytes;
};

// A refused read or write: which member, the kernel's reason, and which of the two.
struct Refusal {
  int member;
  int error;
  bool writing = false;
};

// Whether a test made this direct read or write fail (fail_direct_copy).
bool copy_fails() {
  if (copies_before_failure.load() < 0 || copies_before_failure.fetch_sub(1) != 0) return false;
  errno = EPERM;
  return true;
}

// Copies `bytes` from `remote` in member `member` into `local`: false, with errno set, where the
// kernel refuses (or a test made this read fail).
bool read_directly(const FingerprintBoard& board, int member, const void* remote, void* local,
                   size_t bytes) {
  if (const int pause = milliseconds_before_reads.exchange(0); pause > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(pause));
  if (copy_fails()) return false;
  return board.read(member, remote, local, bytes);
}

// Sends every member the bytes it has asked of this member's input `mine`.
void answer_asks(const DirectCall& call, Input mine) {
  const MPI_Comm asks = call.board.asks();
  for (;;) {
    int asked = 0;
    MPI_Status status{};
    MPI_Iprobe(MPI_ANY_SOURCE, kAskTag, asks, &asked, &status);
    if (asked == 0) return;
    Ask ask{};
    MPI_Recv(&ask, 3, MPI_UINT64_T, status.MPI_SOURCE, kAskTag, asks, MPI_STATUS_IGNORE);
    // The asker waits for an answer and this member may not leave without its acknowledgment:
    // a wrong ask cannot be recovered from, so it ends the job.
    if (mine.data == nullptr || ask.sequence != call.sequence || ask.offset > mine.bytes ||
        ask.bytes > mine.bytes - ask.offset)
      abort_job(fmt::format("in {}: member {} asked for {} bytes at {} of collective #{} over "
                            "'{}', which this member does not hold (it is in #{}, with {} "
                            "bytes); this is a bug in nnx",
                            call.op, status.MPI_SOURCE, ask.bytes, ask.offset, ask.sequence,
                            call.comm_name, call.sequence, mine.bytes));
    MPI_Send(static_cast<const char*>(mine.data) + ask.offset, static_cast<int>(ask.bytes),
             MPI_BYTE, status.MPI_SOURCE, kAnswerTag, asks);
  }
}

// Copies `bytes` at byte `offset` of member `member`'s input into `local`: straight from its
// memory (unless `refused` already), or, where the kernel refuses, asked of the member through MPI
// (it keeps its input until this member acknowledges it). Meanwhile this member answers what
// others ask of `mine`.
void read_or_ask(const DirectCall& call, int member, size_t offset, void* local, size_t bytes,
                 Input mine, bool refused = false) {
  if (bytes == 0) return;
  const auto* theirs = static_cast<const char*>(call.board.address(member, call.sequence));
  if (!refused && read_directly(call.board, member, theirs + offset, local, bytes)) return;
  ++asked_reads;
  const MPI_Comm asks = call.board.asks();
  // The answer's receive is posted before the ask leaves, and neither blocks: members may ask
  // each other at once.
  std::array<MPI_Request, 2> requests{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  MPI_Irecv(local, static_cast<int>(bytes), MPI_BYTE, member, kAnswerTag, asks, &requests[0]);
  const Ask ask{call.sequence, offset, bytes};
  MPI_Isend(&ask, 3, MPI_UINT64_T, member, kAskTag, asks, &requests[1]);
  call.board.wake_sleepers();
  auto answered = [&] {
    int done = 0;
    MPI_Testall(2, requests.data(), &done, MPI_STATUSES_IGNORE);
    if (done == 0) answer_asks(call, mine);
    return done != 0;
  };
  wait_until(answered, call.comm, call.op, call.comm_name.c_str(), true);
}

// Ends a collective that only reads: this member keeps its input `mine` until `readers` members
// have acknowledged it, answering what they ask of it meanwhile.
void await_readers(const DirectCall& call, Input mine, int readers) {
  ++direct_runs;
  call.board.await_readers(call.sequence, readers, call.comm, call.op, call.comm_name,
                           [&] { answer_asks(call, mine); });
}

// An all-reduce's read: copies `bytes` from `remote` in member `member` into `local`; the first
// refusal is kept and later reads are skipped.
void read_member(const DirectCall& call, int member, const void* remote, void* local,
                 size_t bytes, std::optional<Refusal>& refused) {
  if (refused || bytes == 0) return;
  if (!read_directly(call.board, member, remote, local, bytes)) refused = Refusal{member, errno};
}

// An all-reduce's write: copies `bytes` at `local` to `remote` in member `member`; the first
// refusal is kept and later copies are skipped.
void write_member(const DirectCall& call, int member, const void* local, void* remote,
                  size_t bytes, std::optional<Refusal>& refused) {
  if (refused || bytes == 0) return;
  if (copy_fails() || !call.board.write(member, local, remote, bytes)) {
    refused = Refusal{member, errno, true};
    return;
  }
  const std::lock_guard<std::mutex> lock(written_mutex);
  if (written_blocks.size() <= static_cast<size_t>(member)) written_blocks.resize(member + 1);
  ++written_blocks[member];
}

// Posts that this member is done with the all-reduce's copies (at `sequence + 1`), waits for
// all, clears its words of `transfers`, and throws on every member if any member's copy failed.
void finish(const DirectCall& call, const SumTransfers& transfers,
            const std::optional<Refusal>& refused) {
  ++direct_runs;
  const bool same = call.board.agree(call.sequence + 1, refused ? kFailed : kDone, call.comm,
                                     call.op, call.comm_name);
  transfers.clear();
  if (same && !refused) return;  // members that all failed agree too
  const std::string what =
      !refused ? std::string("another member could not read or write another's buffer")
      : refused->writing
          ? fmt::format("this rank could not write its sums into member {}'s buffer ({})",
                        refused->member, std::strerror(refused->error))
          : fmt::format("this rank could not read member {}'s input ({})", refused->member,
                        std::strerror(refused->error));
  throw_error(call.op, fmt::format("copying between the members' memory directly over '{}' "
                                   "failed: {}; the output is incomplete. Set "
                                   "NNX_DIRECT_COLLECTIVE_BYTES=0 to move such collectives "
                                   "through MPI",
                                   call.comm_name, what));
}

// Reductions read the members' inputs in blocks, so that each block is added while it is still
// in cache. Three blocks (reduce_in_blocks' scratch) take at most half of a core's L2 cache, in
// powers of two from 128 KiB to 512 KiB, where each rank has a core; 128 KiB where ranks share
// cores, and so their caches. On two ranks with 2 MiB of L2 each, 256 and 512 KiB blocks took a
// 2 MiB all-reduce from 1.04 to 1.00 and 0.98 of MPI's time; on four ranks over two cores they
// were slower than 128 KiB (docs/benchmarks.md).
constexpr size_t kSmallestBlockBytes = 128 << 10, kLargestBlockBytes = 512 << 10;

// Elements of `element` bytes in a block of `call`'s reductions (the board's block_bytes(), which
// member 0 chose with reduce_block_bytes()).
int64_t block_elements(const DirectCall& call, size_t element) {
  return static_cast<int64_t>(std::max<size_t>(1, call.board.block_bytes() / element));
}

// out = the member-order combination of the `numel` elements at byte `offset` in every member's
// input (`own` is this member's), each block of another member's read by read(m, at, into,
// bytes), which returns false to stop. `out` may be this member's own chunk (an all-reduce's sum
// replaces it): sums then go aside until this member's own block has been added. Each step
// writes its sum where the next reads it, so no block is copied to start or end a sum. After
// each block, summed(blocks done so far).
template <class Read, class Summed>
void reduce_in_blocks(const DirectCall& call, const char* own, size_t offset, char* out,
                      int64_t numel, at::ScalarType dtype, ReduceOp op, Read read,
                      Summed summed) {
  // Member 0's block, another member's, and a sum held aside.
  const size_t block_size = call.board.block_bytes();
  thread_local std::vector<char> scratch;
  if (scratch.size() < 3 * block_size) scratch.resize(3 * block_size);
  char* first = scratch.data();
  char* incoming = first + block_size;
  char* held = incoming + block_size;
  const size_t element = c10::elementSize(dtype);
  const int64_t block = block_elements(call, element);
  const bool out_is_own = out == own + offset;
  for (int64_t start = 0; start < numel; start += block) {
    const int64_t n = std::min(block, numel - start);
    const size_t at = offset + static_cast<size_t>(start) * element;
    const size_t bytes = static_cast<size_t>(n) * element;
    char* to = out + (at - offset);
    const char* sum = own + at;
    if (call.me != 0) {
      char* into = out_is_own ? first : to;
      if (!read(0, at, into, bytes)) return;
      sum = into;
    }
    for (int m = 1; m < call.members; ++m) {
      const char* from = own + at;
      if (m != call.me) {
        if (!read(m, at, incoming, bytes)) return;
        from = incoming;
      }
      char* next = out_is_own && m < call.me ? held : to;
      combine_into(next, sum, from, n, dtype, op, call.op);
      sum = next;
    }
    if (sum != to) std::memcpy(to, sum, bytes);  // one member: its own block
    summed(start / block + 1);
  }
}

// Members read in turn from the one after them, so they do not all read member 0 first.
template <class Read>
void each_other_member(const DirectCall& call, Read read) {
  for (int step = 1; step < call.members; ++step) read((call.me + step) % call.members);
}

}  // namespace

size_t reduce_block_bytes() {
  static const size_t bytes = [] {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    size_t block = kSmallestBlockBytes;
    if (ranks_outnumber_cores() || l2 <= 0) return block;
    while (2 * block <= kLargestBlockBytes && 3 * 2 * block <= static_cast<size_t>(l2) / 2)
      block *= 2;
    return block;
  }();
  return bytes;
}

int64_t direct_collectives_run() { return direct_runs.load(); }

int64_t direct_reads_asked() { return asked_reads.load(); }

int64_t direct_reads_early() { return early_reads.load(); }

int64_t direct_blocks_written(int member) {
  const std::lock_guard<std::mutex> lock(written_mutex);
  return static_cast<size_t>(member) < written_blocks.size() ? written_blocks[member] : 0;
}

void fail_direct_copy(int after) { copies_before_failure = after; }

void pause_direct_reads(int milliseconds) { milliseconds_before_reads = milliseconds; }

MovedParts::MovedParts(int members, int me, const void* mine, size_t mine_bytes, size_t offset,
                       void* out, size_t bytes)
    : me_(me),
      mine_(mine),
      mine_bytes_(mine_bytes),
      offset_(offset),
      out_(static_cast<char*>(out)),
      bytes_(bytes),
      states_(static_cast<size_t>(members), State::unread) {}

OwnPart MovedParts::own_part() const {
  return {static_cast<const char*>(mine_) + offset_, out_ + me_ * bytes_, bytes_};
}

void MovedParts::read_posted(const FingerprintBoard& board, uint64_t sequence) {
  const int members = static_cast<int>(states_.size());
  for (int step = 1; step < members; ++step) {
    const int m = (me_ + step) % members;
    if (states_[m] != State::unread || !board.posted_same(m, sequence)) continue;
    const auto* theirs = static_cast<const char*>(board.address(m, sequence));
    if (!read_directly(board, m, theirs + offset_, out_ + m * bytes_, bytes_)) {
      states_[m] = State::refused;
      continue;
    }
    states_[m] = State::read;
    ++early_reads;
    board.acknowledge(m, sequence);
  }
}

void direct_move(const DirectCall& call, MovedParts& parts) {
  each_other_member(call, [&](int m) {
    if (parts.states_[m] == MovedParts::State::read) return;
    read_or_ask(call, m, parts.offset_, parts.out_ + m * parts.bytes_, parts.bytes_,
                {parts.mine_, parts.mine_bytes_}, parts.states_[m] == MovedParts::State::refused);
    call.board.acknowledge(m, call.sequence);
  });
  await_readers(call, {parts.mine_, parts.mine_bytes_}, call.members - 1);
}

void direct_reduce_scatter(const DirectCall& call, const void* mine, void* out, int64_t numel,
                           at::ScalarType dtype) {
  check_combinable(dtype, call.op);
  const size_t chunk_bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  const Input input{mine, static_cast<size_t>(call.members) * chunk_bytes};
  const size_t my_chunk = static_cast<size_t>(call.me) * chunk_bytes;
  reduce_in_blocks(call, static_cast<const char*>(mine), my_chunk, static_cast<char*>(out), numel,
                   dtype, ReduceOp::sum,
                   [&](int m, size_t at, char* into, size_t bytes) {
                     read_or_ask(call, m, at, into, bytes, input);
                     return true;
                   },
                   [](int64_t) {});
  each_other_member(call, [&](int m) { call.board.acknowledge(m, call.sequence); });
  await_readers(call, input, call.members - 1);
}

void direct_all_reduce(const DirectCall& call, void* buffer, int64_t numel, at::ScalarType dtype,
                       ReduceOp op) {
  check_combinable(dtype, call.op);
  auto* data = static_cast<char*>(buffer);
  const size_t element = c10::elementSize(dtype);
  const int64_t block = block_elements(call, element);
  auto first_of = [&](int chunk) { return numel * chunk / call.members; };
  auto offset_of = [&](int chunk) { return static_cast<size_t>(first_of(chunk)) * element; };
  c10::SmallVector<uint64_t, 16> blocks;
  for (int m = 0; m < call.members; ++m)
    blocks.push_back(static_cast<uint64_t>((first_of(m + 1) - first_of(m) + block - 1) / block));
  SumTransfers transfers(call, blocks);
  std::optional<Refusal> refused;
  auto address_of = [&](int m) {
    return static_cast<char*>(const_cast<void*>(call.board.address(m, call.sequence)));
  };
  auto read = [&](int m, size_t at, void* into, size_t bytes) {
    read_member(call, m, address_of(m) + at, into, bytes, refused);
    return !refused;
  };
  reduce_in_blocks(call, data, offset_of(call.me), data + offset_of(call.me),
                   first_of(call.me + 1) - first_of(call.me), dtype, op, read,
                   [&](int64_t done) { transfers.summed(static_cast<uint64_t>(done)); });
  if (refused) transfers.summed(blocks[call.me]);  // nobody waits for sums that will not come
  // Block `b` of chunk `m`: its byte offset in every member's buffer, and its bytes.
  auto block_at = [&](int m, uint64_t b) {
    const int64_t start = first_of(m) + static_cast<int64_t>(b) * block;
    const int64_t n = std::min(block, first_of(m + 1) - start);
    return std::pair(static_cast<size_t>(start) * element, static_cast<size_t>(n) * element);
  };
  transfers.run(
      [&](int from, uint64_t b) {
        const auto [at, bytes] = block_at(from, b);
        read(from, at, data + at, bytes);
      },
      call.board.writes_allowed()
          ? std::function<void(int, uint64_t)>([&](int to, uint64_t b) {
              const auto [at, bytes] = block_at(call.me, b);
              write_member(call, to, data + at, address_of(to) + at, bytes, refused);
            })
          : nullptr);
  finish(call, transfers, refused);
}

void direct_broadcast(const DirectCall& call, int root, void* out, size_t bytes) {
  if (call.me == root) return await_readers(call, {out, bytes}, call.members - 1);
  ++direct_runs;
  read_or_ask(call, root, 0, out, bytes, {nullptr, 0});
  call.board.acknowledge(root, call.sequence);
}

}  // namespace nnx::detail
