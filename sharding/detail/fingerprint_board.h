// The fingerprint board: shared memory where each member of a communicator posts the
// fingerprint of the collective it is about to make and reads the others'. Where all members
// share one machine, comparing there costs a cache line per member instead of an MPI
// all-reduce. A member reads only from members that posted the same fingerprint, and no member
// returns or lets its input change before all have posted, so a mismatch is caught on every
// member before any input is at risk. Small collectives move their data on the board too: each
// member writes its input into its own region before it posts, and reads the others' once all
// have posted. Larger ones may post their input's address instead, and members then read each
// other's inputs directly (process_memory.h) where the kernel lets them.
#pragma once

#include <mpi.h>

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace nnx::detail {

// The 24-bit field, never 0, that marks collective `sequence` in the board's words.
uint64_t sequence_field(uint64_t sequence);

// How many boards this process has open (for tests).
int64_t fingerprint_boards_open();
// Makes the next board this process opens find the others' memory unreadable, as a kernel that
// refuses process_vm_readv would (for tests).
void refuse_next_board_probe();
// Makes the next board this process opens find the others' memory readable but not writable
// (for tests).
void refuse_next_board_writes();
// Makes the next board this process makes (as member 0) fail to reserve its segment with the
// staging area, as a full /dev/shm would: it opens without the area (for tests).
void refuse_next_staging_area();

// A copy within one member's memory that agree makes while the others post: the member's own
// part of a collective's output, which needs nobody else's data.
struct OwnPart {
  const void* from = nullptr;
  void* to = nullptr;
  size_t bytes = 0;
};

// Its own cache lines: waits poll its fields, and sharing a line with the heap's neighbours cost a
// quarter of a small all-reduce's time on 4 ranks over 2 cores (tools/bench/collectives.cpp).
class alignas(64) FingerprintBoard {
 public:
  // Collective over `comm`, within the collective `op` that first needs the board (its waits
  // name that call): a board, or null on every member where any member is not `allowed`, they
  // do not all share this machine's memory, or the segment cannot be made. `block_bytes`: this
  // member's choice of block_bytes() (member 0's holds for all).
  static std::unique_ptr<FingerprintBoard> open(MPI_Comm comm, int rank, int size, bool allowed,
                                                size_t block_bytes, const char* op,
                                                const std::string& comm_name);
  ~FingerprintBoard();
  FingerprintBoard(const FingerprintBoard&) = delete;
  FingerprintBoard& operator=(const FingerprintBoard&) = delete;

  // Posts this member's fingerprint of collective number `sequence`, waits (without hanging,
  // as wait_for) until every member has posted its own, and says whether all are equal.
  // Data written into own_region(sequence) before the call is visible to every member after it,
  // and so is `address` (posted with the fingerprint) as address(member, sequence). `own_part`
  // is copied once this member has posted, whatever the others post (on a mismatch too).
  // `while_waiting` runs at each look that finds members still missing while those compared so
  // far match: a member may read there the inputs of those that posted the same (posted_same).
  bool agree(uint64_t sequence, uint64_t fingerprint, MPI_Comm comm, const char* op,
             const std::string& comm_name, const void* address = nullptr,
             const OwnPart& own_part = {}, const std::function<void()>& while_waiting = nullptr);
  const void* address(int member, uint64_t sequence) const;
  // Whether `member` has posted collective `sequence` with the fingerprint this member posted.
  bool posted_same(int member, uint64_t sequence) const;

  // A member done reading member `source`'s input of collective `sequence` acknowledges it.
  void acknowledge(int source, uint64_t sequence) const;
  // Waits, as agree does, until `readers` members have acknowledged this member's input of
  // `sequence`, calling `between_polls` every few polls (a member may need something of it). A
  // member that leaves main after acknowledging is not waited for.
  void await_readers(uint64_t sequence, int readers, MPI_Comm comm, const char* op,
                     const std::string& comm_name,
                     const std::function<void()>& between_polls) const;
  // Wakes the members sleeping in a wait here, so they look again (after a message to them).
  void wake_sleepers() const;

  // Inputs of at most this many bytes per member may be read directly from the members' memory
  // (equal on every member; 0 where some member cannot read another's).
  size_t direct_limit() const { return direct_limit_; }
  // Bytes of the blocks in which direct reductions read and sum (equal on every member: a direct
  // all-reduce's members count each other's blocks).
  size_t block_bytes() const { return block_bytes_; }
  // Copies `bytes` at `remote` in member `member`'s memory into `local`; false, with errno set,
  // where the kernel refuses.
  bool read(int member, const void* remote, void* local, size_t bytes) const;
  // Whether members may also write into each other's memory (where direct_limit() > 0), and
  // such a write: `bytes` at `local` to `remote` in member `member`; false, as read.
  bool writes_allowed() const { return writes_allowed_; }
  bool write(int member, const void* local, void* remote, size_t bytes) const;
  // The 1 + members words that a direct all-reduce's members share in member `member`'s slot
  // for collective `sequence` (sum_transfers.h): zero until a direct all-reduce writes them,
  // which tags them and zeroes them when all its members are done with them.
  uint64_t* shared_words(int member, uint64_t sequence) const;
  // Polls `ready` until it holds, as agree waits (without hanging). Whoever makes it hold calls
  // wake_sleepers.
  void wait_until_ready(const std::function<bool()>& ready, MPI_Comm comm, const char* op,
                        const std::string& comm_name) const {
    wait(ready, comm, op, comm_name);
  }
  // Where members ask each other for what the kernel would not let them read (direct_limit() >
  // 0): a communicator of the board's own, so no other message on the members' one matches.
  MPI_Comm asks() const { return asks_; }

  // Bytes of input each member can pass on the board per collective (equal on every member; 0
  // where the segment has no room for data). Regions alternate by sequence parity: a member
  // writes region s + 2 only after every member has posted s + 1, so done reading s.
  size_t capacity() const { return capacity_; }
  void* own_region(uint64_t sequence) const { return region(rank_, sequence); }
  void* region(int member, uint64_t sequence) const;

  // The staging area of staged all-reduces (staged_all_reduce.h): a slot for the sums and one
  // per member's input, staging_bytes() / (members + 1) bytes each (equal on every member; 0
  // where the segment has no area).
  size_t staging_bytes() const { return staging_bytes_; }
  void* staging() const;

 private:
  FingerprintBoard(void* memory, size_t bytes, size_t capacity, size_t staging_bytes,
                   size_t direct_limit, bool writes_allowed, size_t block_bytes, MPI_Comm asks,
                   std::vector<pid_t> pids, int rank, int size);
  uint64_t* slot(int member, uint64_t sequence) const;
  // Polls `ready` until it holds: spinning, yielding, and where sleeps_, sleeping (without
  // hanging, as wait_until, with its `departure_matters`). `before_sleep` runs just before the
  // last look before a sleep, so nothing it would see is slept through.
  void wait(const std::function<bool()>& ready, MPI_Comm comm, const char* op,
            const std::string& comm_name, const std::function<void()>& before_sleep = nullptr,
            const std::function<bool(int)>& departure_matters = nullptr) const;

  void* memory_;
  size_t bytes_;
  size_t capacity_;
  size_t staging_bytes_;
  size_t direct_limit_;
  bool writes_allowed_;
  size_t block_bytes_;
  MPI_Comm asks_;  // a duplicate of the members' communicator, where direct_limit_ > 0
  std::vector<pid_t> pids_;  // by member
  int rank_;
  int size_;
  size_t slot_stride_;  // bytes from one member's slot to the next
  bool sleeps_;  // waits may sleep: ranks outnumber this machine's cores
};

}  // namespace nnx::detail
