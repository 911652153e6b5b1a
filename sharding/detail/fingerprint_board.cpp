// The board's segment: per member, kSlots cache lines; the slot of (member, sequence) holds one
// word, the fingerprint's upper 40 bits over the sequence's lower 24. A member is at most one
// collective ahead of another (it cannot pass its next check until the other posts), so four
// slots never wrap onto a word still being read.
#include <nnx/sharding/detail/fingerprint_board.h>

#include <nnx/sharding/detail/collective_wait.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace nnx::detail {

namespace {

constexpr uint64_t kSlots = 4;
constexpr size_t kLine = 64;
constexpr uint64_t kSequenceBits = 0xFFFFFF;

std::atomic<uint64_t> boards_made{0};

uint64_t word_of(uint64_t sequence, uint64_t fingerprint) {
  return (fingerprint & ~kSequenceBits) | (sequence & kSequenceBits);
}


// A hash of this machine's name: members with different names cannot share memory.
uint64_t host_hash() {
  std::array<char, 256> name{};
  gethostname(name.data(), name.size() - 1);
  return std::hash<std::string>{}(name.data());
}

}  // namespace

FingerprintBoard::FingerprintBoard(void* memory, size_t bytes, int rank, int size)
    : memory_(memory), bytes_(bytes), rank_(rank), size_(size) {}

FingerprintBoard::~FingerprintBoard() { munmap(memory_, bytes_); }

uint64_t* FingerprintBoard::slot(int member, uint64_t sequence) const {
  const size_t index = static_cast<size_t>(member) * kSlots + sequence % kSlots;
  return reinterpret_cast<uint64_t*>(static_cast<char*>(memory_) + index * kLine);
}

std::unique_ptr<FingerprintBoard> FingerprintBoard::open(MPI_Comm comm, int rank, int size,
                                                        const char* op,
                                                        const std::string& comm_name) {
  // The opening's collectives, watched as the collective they serve.
  auto watched = [&](auto start) {
    MPI_Request request = MPI_REQUEST_NULL;
    start(&request);
    wait_for(&request, comm, op, comm_name.c_str());
  };
  std::vector<uint64_t> hosts(size);
  const uint64_t mine = host_hash();
  watched([&](MPI_Request* r) {
    MPI_Iallgather(&mine, 1, MPI_UINT64_T, hosts.data(), 1, MPI_UINT64_T, comm, r);
  });
  for (uint64_t host : hosts)
    if (host != mine) return nullptr;  // every member sees the same list: all return here

  // Member 0 makes the segment and names it; the others map it; it is unlinked once all have.
  const size_t bytes = static_cast<size_t>(size) * kSlots * kLine;
  std::array<char, 64> name{};
  int fd = -1;
  if (rank == 0) {
    std::snprintf(name.data(), name.size(), "/nnx-fingerprints-%d-%llu", static_cast<int>(getpid()),
                  static_cast<unsigned long long>(boards_made++));
    fd = shm_open(name.data(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0 && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      close(fd);
      shm_unlink(name.data());
      fd = -1;
    }
    if (fd < 0) name[0] = '\0';
  }
  watched([&](MPI_Request* r) {
    MPI_Ibcast(name.data(), static_cast<int>(name.size()), MPI_CHAR, 0, comm, r);
  });
  if (rank != 0 && name[0] != '\0') fd = shm_open(name.data(), O_RDWR, 0);
  void* memory = fd >= 0 ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                         : MAP_FAILED;
  if (fd >= 0) close(fd);
  int mapped = memory != MAP_FAILED ? 1 : 0, all_mapped = 0;
  watched([&](MPI_Request* r) {
    MPI_Iallreduce(&mapped, &all_mapped, 1, MPI_INT, MPI_MIN, comm, r);
  });
  if (rank == 0 && name[0] != '\0') shm_unlink(name.data());
  if (all_mapped == 0) {
    if (memory != MAP_FAILED) munmap(memory, bytes);
    return nullptr;
  }
  return std::unique_ptr<FingerprintBoard>(new FingerprintBoard(memory, bytes, rank, size));
}

bool FingerprintBoard::agree(uint64_t sequence, uint64_t fingerprint, MPI_Comm comm,
                             const char* op, const std::string& comm_name) {
  const uint64_t mine = word_of(sequence, fingerprint);
  std::atomic_ref<uint64_t>(*slot(rank_, sequence)).store(mine, std::memory_order_release);
  bool same = true;
  for (int member = 0; member < size_; ++member) {
    if (member == rank_) continue;
    std::atomic_ref<uint64_t> theirs(*slot(member, sequence));
    auto posted = [&] {
      return (theirs.load(std::memory_order_acquire) & kSequenceBits) ==
             (sequence & kSequenceBits);
    };
    if (!posted()) wait_until(posted, comm, op, comm_name.c_str());
    same = same && theirs.load(std::memory_order_acquire) == mine;
  }
  return same;
}

}  // namespace nnx::detail
