// The board's segment: a header line holding a nonce and the wake-up words, then per member
// kSlots slots of whole cache lines; the slot of (member, sequence) holds one word, the
// fingerprint's upper 40 bits over a 24-bit sequence field that is never 0 (a zero word: nothing
// posted yet), then the address posted with it, then how many members have acknowledged reading
// the input at that address, and which (a bit per member), then the words a direct all-reduce
// shares. A member is at most one collective ahead of another (it cannot pass its next check
// until the other posts), so four slots never wrap onto a word still being read or
// acknowledged, even by a direct all-reduce, whose members use the address and shared words
// posted a sequence number back. After the slots, per member two data regions of `capacity`
// bytes each.
#include <nnx/sharding/detail/fingerprint_board.h>

#include <nnx/sharding/detail/collective_wait.h>
#include <nnx/sharding/detail/process_memory.h>
#include <nnx/sharding/threads.h>

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace nnx::detail {

namespace {

constexpr uint64_t kSlots = 4;
constexpr size_t kLine = 64;
constexpr uint64_t kSequenceBits = 0xFFFFFF;
constexpr size_t kReadersWord = 2;  // in a slot: how many members have read the posted input
constexpr size_t kReadMaskWord = 3;  // and which, a bit per member, for the departure check
static_assert(std::atomic_ref<uint64_t>::is_always_lock_free,
              "the board's words are shared between processes");

std::atomic<uint64_t> boards_made{0};
std::atomic<int64_t> boards_open{0};

// Where ranks outnumber cores, members that have waited a while sleep on the header's `wakes`
// word (a futex in the shared segment), counted in `sleepers`, so a waiting rank gives its core
// to one that still works; a member that posts while any sleeps bumps `wakes` and wakes them.
// Elsewhere waits only spin and yield: a wake-up costs more than the wait it ends.
constexpr size_t kWakesOffset = 8, kSleepersOffset = 12;
constexpr long kSleepNanoseconds = 200'000;  // then the wait looks at the clock and departures
// Rounds of polls (a few hundred each) a member spins and yields through before it sleeps: short
// waits, as in a small model's step, end sooner spinning than through a wake-up.
constexpr unsigned kYieldsBeforeSleep = 8;

uint32_t* header_pointer(void* memory, size_t offset) {
  return reinterpret_cast<uint32_t*>(static_cast<char*>(memory) + offset);
}

std::atomic_ref<uint32_t> header_word(void* memory, size_t offset) {
  return std::atomic_ref<uint32_t>(*header_pointer(memory, offset));
}

void futex_sleep(uint32_t* word, uint32_t expected) {
  timespec timeout{0, kSleepNanoseconds};
  syscall(SYS_futex, word, FUTEX_WAIT, expected, &timeout, nullptr, 0);
}

void futex_wake_all(uint32_t* word) {
  syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

uint64_t word_of(uint64_t sequence, uint64_t fingerprint) {
  return (fingerprint & ~kSequenceBits) | sequence_field(sequence);
}

// A hash of this machine's name: members with different names cannot share memory.
uint64_t host_hash() {
  std::array<char, 256> name{};
  gethostname(name.data(), name.size() - 1);
  return std::hash<std::string>{}(name.data());
}

// Words of a slot's read mask, words a direct all-reduce shares, and bytes from one slot to the
// next.
size_t mask_words(int size) { return (static_cast<size_t>(size) + 63) / 64; }
size_t shared_word_count(int size) { return 1 + static_cast<size_t>(size); }
size_t slot_stride(int size) {
  const size_t words = kReadMaskWord + mask_words(size) + shared_word_count(size);
  return (words + kLine / 8 - 1) / (kLine / 8) * kLine;
}
size_t slots_bytes(int size) {
  return kLine + static_cast<size_t>(size) * kSlots * slot_stride(size);
}

// Bytes of input per member a collective may pass on the board: NNX_BOARD_COLLECTIVE_BYTES
// (0: none; at most 16 MiB), else 64 KiB, rounded up to whole cache lines. Member 0's value
// holds for all.
size_t wanted_capacity() {
  const char* env = std::getenv("NNX_BOARD_COLLECTIVE_BYTES");
  const long long bytes = std::min(env != nullptr ? std::atoll(env) : 64LL << 10, 16LL << 20);
  return bytes <= 0 ? 0 : (static_cast<size_t>(bytes) + kLine - 1) / kLine * kLine;
}

// Bytes of input per member up to which collectives read the members' inputs directly:
// NNX_DIRECT_COLLECTIVE_BYTES (0: never; at most 1 GiB, so that a read asked through MPI fits
// its int count), else 64 MiB, the largest size tools/bench/collectives.cpp times (there every
// direct collective took 0.19-1.02 of MPI's time, on 2 and 4 ranks). Member 0's value holds for
// all.
size_t wanted_direct_limit() {
  const char* env = std::getenv("NNX_DIRECT_COLLECTIVE_BYTES");
  if (env == nullptr || *env == '\0') return size_t{64} << 20;
  const long long bytes = std::min(std::atoll(env), 1LL << 30);
  return bytes <= 0 ? 0 : static_cast<size_t>(bytes);
}

// Bytes of the staging area (staging()) for `size` members: a slot for the sums and one per
// member's input, each of NNX_STAGED_ALL_REDUCE_BYTES (0: no area; at most 16 MiB), else 1 MiB,
// rounded up to whole cache lines. Member 0's value holds for all.
size_t wanted_staging_bytes(int size) {
  const char* env = std::getenv("NNX_STAGED_ALL_REDUCE_BYTES");
  const long long slot = std::min(env != nullptr && *env != '\0' ? std::atoll(env) : 1LL << 20,
                                  16LL << 20);
  if (slot <= 0) return 0;
  return (static_cast<size_t>(slot) + kLine - 1) / kLine * kLine * (static_cast<size_t>(size) + 1);
}

// A word each member reads from every other at the opening, to learn whether the kernel lets it
// read their memory: it holds its process id mixed with a constant.
constexpr uint64_t kProbeMix = 0x6e6e782d70726f62ull;
const uint64_t& probe_word() {
  static const uint64_t word = kProbeMix ^ static_cast<uint64_t>(getpid());
  return word;
}

// A word each member writes into every other's (nothing reads it) to learn whether the kernel
// lets it write their memory.
uint64_t write_probe_word = 0;

std::atomic<bool> refuse_next_probe{false};
std::atomic<bool> refuse_next_writes{false};
std::atomic<bool> refuse_staging{false};

// What each member tells the others at the opening: its host, whether it allows a board, its
// process id, and where its probe words lie.
constexpr size_t kSeatWords = 5;
constexpr size_t kHostSeat = 0, kAllowedSeat = 1, kPidSeat = 2, kProbeSeat = 3,
                 kWriteProbeSeat = 4;

// Whether this member can read every other member's probe word.
bool can_read_members(const std::vector<uint64_t>& seats, int rank, int size) {
  for (int m = 0; m < size; ++m) {
    if (m == rank) continue;
    const auto pid = static_cast<pid_t>(seats[kSeatWords * m + kPidSeat]);
    uint64_t seen = 0;
    if (!read_process_memory(pid, reinterpret_cast<const void*>(seats[kSeatWords * m + kProbeSeat]),
                             &seen, sizeof seen) ||
        seen != (kProbeMix ^ static_cast<uint64_t>(pid)))
      return false;
  }
  return true;
}

// Whether this member can write every other member's write probe word.
bool can_write_members(const std::vector<uint64_t>& seats, int rank, int size) {
  for (int m = 0; m < size; ++m) {
    if (m == rank) continue;
    const auto pid = static_cast<pid_t>(seats[kSeatWords * m + kPidSeat]);
    const uint64_t value = kProbeMix ^ static_cast<uint64_t>(pid);
    if (!write_process_memory(pid, &value,
                              reinterpret_cast<void*>(seats[kSeatWords * m + kWriteProbeSeat]),
                              sizeof value))
      return false;
  }
  return true;
}

// `staging` is whole cache lines already (wanted_staging_bytes).
size_t segment_size(int size, size_t capacity, size_t staging) {
  return slots_bytes(size) + 2 * size * capacity + staging;
}

// Sizes the segment, with its pages reserved (a tmpfs page that cannot be had later would be a
// SIGBUS on first touch): with data regions of `capacity` bytes and a staging area of `staging`,
// else without the staging area (staging 0), else without either (capacity 0).
bool size_segment(int fd, int size, size_t& capacity, size_t& staging) {
  auto reserve = [&] {
    return posix_fallocate(fd, 0, static_cast<off_t>(segment_size(size, capacity, staging))) ==
           0;
  };
  if (capacity > 0 && staging > 0 && !refuse_staging.exchange(false) && reserve()) return true;
  staging = 0;
  if (capacity > 0 && reserve()) return true;
  capacity = 0;
  return reserve();
}

}  // namespace

uint64_t sequence_field(uint64_t sequence) { return sequence % kSequenceBits + 1; }

int64_t fingerprint_boards_open() { return boards_open.load(); }

void refuse_next_board_probe() { refuse_next_probe = true; }

void refuse_next_board_writes() { refuse_next_writes = true; }

void refuse_next_staging_area() { refuse_staging = true; }

FingerprintBoard::FingerprintBoard(void* memory, size_t bytes, size_t capacity,
                                   size_t staging_bytes, size_t direct_limit, bool writes_allowed,
                                   size_t block_bytes, MPI_Comm asks, std::vector<pid_t> pids,
                                   int rank, int size)
    : memory_(memory),
      bytes_(bytes),
      capacity_(capacity),
      staging_bytes_(staging_bytes),
      direct_limit_(direct_limit),
      writes_allowed_(writes_allowed),
      block_bytes_(block_bytes),
      asks_(asks),
      pids_(std::move(pids)),
      rank_(rank),
      size_(size),
      slot_stride_(slot_stride(size)),
      sleeps_(ranks_outnumber_cores()) {
  ++boards_open;
}

FingerprintBoard::~FingerprintBoard() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (asks_ != MPI_COMM_NULL && finalized == 0) MPI_Comm_free(&asks_);
  munmap(memory_, bytes_);
  --boards_open;
}

uint64_t* FingerprintBoard::slot(int member, uint64_t sequence) const {
  // Polled in every wait: the stride is kept, not computed.
  const size_t index = static_cast<size_t>(member) * kSlots + sequence % kSlots;
  return reinterpret_cast<uint64_t*>(static_cast<char*>(memory_) + kLine + index * slot_stride_);
}

void* FingerprintBoard::region(int member, uint64_t sequence) const {
  const size_t index = 2 * static_cast<size_t>(member) + sequence % 2;
  return static_cast<char*>(memory_) + slots_bytes(size_) + index * capacity_;
}

void* FingerprintBoard::staging() const {
  return static_cast<char*>(memory_) + slots_bytes(size_) + 2 * size_ * capacity_;
}

std::unique_ptr<FingerprintBoard> FingerprintBoard::open(MPI_Comm comm, int rank, int size,
                                                        bool allowed, size_t block_bytes,
                                                        const char* op,
                                                        const std::string& comm_name) {
  // The opening's collectives, watched as the collective they serve.
  auto watched = [&](auto start) {
    MPI_Request request = MPI_REQUEST_NULL;
    start(&request);
    wait_for(&request, comm, op, comm_name.c_str());
  };
  std::vector<uint64_t> seats(kSeatWords * static_cast<size_t>(size));
  const std::array<uint64_t, kSeatWords> mine{host_hash(), allowed ? 1u : 0u,
                                              static_cast<uint64_t>(getpid()),
                                              reinterpret_cast<uint64_t>(&probe_word()),
                                              reinterpret_cast<uint64_t>(&write_probe_word)};
  watched([&](MPI_Request* r) {
    MPI_Iallgather(mine.data(), kSeatWords, MPI_UINT64_T, seats.data(), kSeatWords, MPI_UINT64_T,
                   comm, r);
  });
  for (int m = 0; m < size; ++m) {
    const uint64_t* seat = seats.data() + kSeatWords * m;
    if (seat[kHostSeat] != mine[kHostSeat] || seat[kAllowedSeat] == 0) return nullptr;  // all alike
  }

  // Member 0 makes the segment, names it and writes a nonce into it; the others map it and
  // check the nonce (a name can reach another machine's segment); it is unlinked once all have.
  struct Announcement {
    std::array<char, 64> name{};
    uint64_t nonce = 0;
    uint64_t capacity = 0;
    uint64_t staging = 0;
    uint64_t direct_limit = 0;
    uint64_t block_bytes = 0;
  } announced;
  int fd = -1;
  if (rank == 0) {
    announced.nonce = std::hash<std::string>{}(fmt::format(
        "{}-{}-{}", getpid(), boards_made.load(),
        std::chrono::steady_clock::now().time_since_epoch().count())) | 1;
    std::snprintf(announced.name.data(), announced.name.size(), "/nnx-fingerprints-%d-%llu",
                  static_cast<int>(getpid()), static_cast<unsigned long long>(boards_made++));
    fd = shm_open(announced.name.data(), O_CREAT | O_EXCL | O_RDWR, 0600);
    size_t capacity = wanted_capacity();
    size_t staging = wanted_staging_bytes(size);
    if (fd >= 0 && !size_segment(fd, size, capacity, staging)) {
      close(fd);
      shm_unlink(announced.name.data());
      fd = -1;
    }
    if (fd < 0) announced.name[0] = '\0';
    announced.capacity = capacity;
    announced.staging = staging;
    announced.direct_limit = wanted_direct_limit();
    announced.block_bytes = block_bytes;
  }
  // Rank 0's sizes, announced below; its own mapping uses them already.
  auto segment_bytes = [&] { return segment_size(size, announced.capacity, announced.staging); };
  void* memory = MAP_FAILED;
  if (rank == 0 && fd >= 0) {
    memory = mmap(nullptr, segment_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (memory != MAP_FAILED) *static_cast<uint64_t*>(memory) = announced.nonce;
  }
  watched([&](MPI_Request* r) {
    MPI_Ibcast(&announced, static_cast<int>(sizeof(announced)), MPI_BYTE, 0, comm, r);
  });
  if (rank != 0 && announced.name[0] != '\0') {
    fd = shm_open(announced.name.data(), O_RDWR, 0);
    if (fd >= 0)
      memory = mmap(nullptr, segment_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (memory != MAP_FAILED && *static_cast<uint64_t*>(memory) != announced.nonce) {
      munmap(memory, segment_bytes());
      memory = MAP_FAILED;
    }
  }
  if (fd >= 0) close(fd);
  // Whether all mapped the segment, whether all can read each other's memory (every probe
  // word is read before any member leaves this all-reduce), and whether all can write it.
  const bool refused = refuse_next_probe.exchange(false);
  const bool unwritable = refuse_next_writes.exchange(false);
  const bool readable =
      !refused && announced.direct_limit > 0 && can_read_members(seats, rank, size);
  const bool writable = readable && !unwritable && can_write_members(seats, rank, size);
  std::array<int, 3> done{memory != MAP_FAILED ? 1 : 0, readable ? 1 : 0, writable ? 1 : 0},
      all_done{};
  watched([&](MPI_Request* r) {
    MPI_Iallreduce(done.data(), all_done.data(), 3, MPI_INT, MPI_MIN, comm, r);
  });
  if (rank == 0 && announced.name[0] != '\0') shm_unlink(announced.name.data());
  if (all_done[0] == 0) {
    if (memory != MAP_FAILED) munmap(memory, segment_bytes());
    return nullptr;
  }
  std::vector<pid_t> pids(static_cast<size_t>(size));
  for (int m = 0; m < size; ++m) pids[m] = static_cast<pid_t>(seats[kSeatWords * m + kPidSeat]);
  // Where members read directly, a communicator of their own carries the reads they ask instead.
  MPI_Comm asks = MPI_COMM_NULL;
  if (all_done[1] != 0) watched([&](MPI_Request* r) { MPI_Comm_idup(comm, &asks, r); });
  return std::unique_ptr<FingerprintBoard>(new FingerprintBoard(
      memory, segment_bytes(), announced.capacity, static_cast<size_t>(announced.staging),
      all_done[1] != 0 ? static_cast<size_t>(announced.direct_limit) : 0, all_done[2] != 0,
      static_cast<size_t>(announced.block_bytes), asks, std::move(pids), rank, size));
}

const void* FingerprintBoard::address(int member, uint64_t sequence) const {
  return reinterpret_cast<const void*>(
      std::atomic_ref<uint64_t>(slot(member, sequence)[1]).load(std::memory_order_relaxed));
}

bool FingerprintBoard::read(int member, const void* remote, void* local, size_t bytes) const {
  return read_process_memory(pids_[member], remote, local, bytes);
}

bool FingerprintBoard::write(int member, const void* local, void* remote, size_t bytes) const {
  return write_process_memory(pids_[member], local, remote, bytes);
}

uint64_t* FingerprintBoard::shared_words(int member, uint64_t sequence) const {
  return slot(member, sequence) + kReadMaskWord + mask_words(size_);
}

bool FingerprintBoard::agree(uint64_t sequence, uint64_t fingerprint, MPI_Comm comm,
                             const char* op, const std::string& comm_name, const void* address,
                             const OwnPart& own_part,
                             const std::function<void()>& while_waiting) {
  const uint64_t mine = word_of(sequence, fingerprint);
  // Published by the word's release below; no reader acknowledges before it sees the word.
  uint64_t* own = slot(rank_, sequence);
  std::atomic_ref<uint64_t>(own[1]).store(reinterpret_cast<uint64_t>(address),
                                          std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(own[kReadersWord]).store(0, std::memory_order_relaxed);
  for (size_t w = 0; w < mask_words(size_); ++w)
    std::atomic_ref<uint64_t>(own[kReadMaskWord + w]).store(0, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(own[0]).store(mine, std::memory_order_release);
  wake_sleepers();
  if (own_part.bytes > 0) std::memcpy(own_part.to, own_part.from, own_part.bytes);
  bool same = true;
  int next = 0;  // members before `next` have posted and been compared
  unsigned polls = 0;
  auto all_posted = [&] {
    for (; next < size_; ++next) {
      if (next == rank_) continue;
      const uint64_t theirs =
          std::atomic_ref<uint64_t>(*slot(next, sequence)).load(std::memory_order_acquire);
      if ((theirs & kSequenceBits) != sequence_field(sequence)) break;
      same = same && theirs == mine;
    }
    if (next == size_) return true;
    if (while_waiting && same) while_waiting();
    // While it waits, this rank lets MPI progress calls others may be finishing first.
    if (++polls % 64 == 0) {
      int flag = 0;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, MPI_STATUS_IGNORE);
    }
    return false;
  };
  if (!all_posted()) wait(all_posted, comm, op, comm_name);
  return same;
}

bool FingerprintBoard::posted_same(int member, uint64_t sequence) const {
  const uint64_t mine =
      std::atomic_ref<uint64_t>(*slot(rank_, sequence)).load(std::memory_order_relaxed);
  return std::atomic_ref<uint64_t>(*slot(member, sequence)).load(std::memory_order_acquire) ==
         mine;
}

void FingerprintBoard::acknowledge(int source, uint64_t sequence) const {
  uint64_t* theirs = slot(source, sequence);
  std::atomic_ref<uint64_t>(theirs[kReadMaskWord + rank_ / 64])
      .fetch_or(uint64_t{1} << (rank_ % 64), std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(theirs[kReadersWord]).fetch_add(1, std::memory_order_release);
  wake_sleepers();
}

void FingerprintBoard::await_readers(uint64_t sequence, int readers, MPI_Comm comm,
                                     const char* op, const std::string& comm_name,
                                     const std::function<void()>& between_polls) const {
  std::atomic_ref<uint64_t> acknowledged(slot(rank_, sequence)[kReadersWord]);
  unsigned polls = 0;
  auto all_read = [&] {
    if (acknowledged.load(std::memory_order_acquire) == static_cast<uint64_t>(readers))
      return true;
    if (++polls % 64 == 0) between_polls();
    return false;
  };
  // A member that has left main can no longer read; one that read first does not matter.
  uint64_t* read_by = slot(rank_, sequence) + kReadMaskWord;
  auto departure_matters = [&](int member) {
    const uint64_t word =
        std::atomic_ref<uint64_t>(read_by[member / 64]).load(std::memory_order_acquire);
    return (word >> (member % 64) & 1) == 0;
  };
  if (!all_read()) wait(all_read, comm, op, comm_name, between_polls, departure_matters);
}

void FingerprintBoard::wake_sleepers() const {
  // The post (or acknowledgment, or ask) before the look at `sleepers`; a sleeper counts itself
  // before its last look: one of the two sees the other. Members of one machine all sleep or
  // none does, so where none does, this skips the fence.
  if (!sleeps_) return;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (header_word(memory_, kSleepersOffset).load(std::memory_order_relaxed) > 0) {
    header_word(memory_, kWakesOffset).fetch_add(1);
    futex_wake_all(header_pointer(memory_, kWakesOffset));
  }
}

void FingerprintBoard::wait(const std::function<bool()>& ready, MPI_Comm comm, const char* op,
                            const std::string& comm_name,
                            const std::function<void()>& before_sleep,
                            const std::function<bool(int)>& departure_matters) const {
  unsigned idles = 0;
  auto sleep = [&] {
    if (++idles <= kYieldsBeforeSleep) return std::this_thread::yield();
    const uint32_t seen = header_word(memory_, kWakesOffset).load(std::memory_order_acquire);
    header_word(memory_, kSleepersOffset).fetch_add(1);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (before_sleep) before_sleep();
    if (!ready()) futex_sleep(header_pointer(memory_, kWakesOffset), seen);
    header_word(memory_, kSleepersOffset).fetch_sub(1);
  };
  wait_until(ready, comm, op, comm_name.c_str(), true, 0,
             sleeps_ ? std::function<void()>(sleep) : std::function<void()>(), departure_matters);
}

}  // namespace nnx::detail
