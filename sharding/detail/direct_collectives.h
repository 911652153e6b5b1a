// The data phase of collectives that move data or sum it, read straight from the members' inputs:
// once every member has posted collective `sequence` with its input's address on the board,
// each member copies what it needs from the others' memory into its output (one copy, as MPI's
// shared-memory transport makes for large messages).
// - A collective that only reads (all-gather, reduce-scatter, all-to-all, broadcast): each member
//   acknowledges every input it is done reading, and returns (letting its own input change) once
//   all its readers have acknowledged its own, as MPI's pairwise transfers do; no member waits for
//   the others' other reads. A read the kernel refuses is asked of its member through MPI instead.
//   An all-gather or all-to-all reads some inputs before every member has posted (MovedParts).
// - An all-reduce: each member sums one chunk of every member's buffer into its own, and the sums
//   move block by block as they are ready, each read by a member that needs it or written to it
//   by the chunk's owner (sum_transfers.h); then all meet once more. A member whose read or
//   write fails says so at the meeting, and every member throws.
#pragma once

#include <nnx/sharding/communicator.h>
#include <nnx/sharding/detail/fingerprint_board.h>

#include <c10/core/ScalarType.h>
#include <c10/util/SmallVector.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace nnx::detail {

// How many collectives this process has run by direct reads (for tests).
int64_t direct_collectives_run();

// How many parts of all-gathers and all-to-alls this process has read while members were still
// posting (MovedParts::read_posted; for tests).
int64_t direct_reads_early();

// How many reads this process has asked of a member through MPI, the kernel having refused them
// (for tests).
int64_t direct_reads_asked();

// Bytes of each block a reduction reads from every member and adds while it is in cache: sized
// to this machine's L2 cache and how many ranks share its cores. A board's members all use
// member 0's choice (FingerprintBoard::block_bytes).
size_t reduce_block_bytes();

// What every direct collective needs besides its buffers.
struct DirectCall {
  FingerprintBoard& board;
  uint64_t sequence;
  int members;
  int me;
  MPI_Comm comm;
  const char* op;
  const std::string& comm_name;
};

// What an all-gather or all-to-all moves: part m of `out` is `bytes` at byte `offset` of member
// m's input (`mine` here); parts are read during the meeting as members post, the rest after.
class MovedParts {
 public:
  MovedParts(int members, int me, const void* mine, size_t mine_bytes, size_t offset, void* out,
             size_t bytes);
  OwnPart own_part() const;
  // Reads and acknowledges the unread part of every member that has posted `sequence` as this
  // member did; a part the kernel refuses is asked through MPI in direct_move.
  void read_posted(const FingerprintBoard& board, uint64_t sequence);

 private:
  friend void direct_move(const DirectCall& call, MovedParts& parts);
  enum class State : uint8_t { unread, read, refused };
  int me_;
  const void* mine_;
  size_t mine_bytes_;
  size_t offset_;
  char* out_;
  size_t bytes_;
  c10::SmallVector<State, 64> states_;  // by member
};

// The data phase of an all-gather (offset 0: out = every member's input in member order) or an
// all-to-all (offset me * bytes: chunk m of out = chunk `me` of member m's input).
void direct_move(const DirectCall& call, MovedParts& parts);
// out = the sum over members, in member order, of chunk `me` of their inputs (`numel` elements of
// `dtype` per chunk). A dtype combine.h has no loop for is an error on every member before any
// read (the dtype is agreed, so all leave together); so in direct_all_reduce.
void direct_reduce_scatter(const DirectCall& call, const void* mine, void* out, int64_t numel,
                           at::ScalarType dtype);
// Every member's `buffer` becomes the member-order combination by `op` of all members' buffers
// (`numel` elements of `dtype`). Each member sums one chunk from the others' buffers into its
// own, the sums move to every member, and all meet at `sequence + 1`.
void direct_all_reduce(const DirectCall& call, void* buffer, int64_t numel, at::ScalarType dtype,
                       ReduceOp op);
// out = the root's `bytes` (nothing to copy on the root, whose out is its input).
void direct_broadcast(const DirectCall& call, int root, void* out, size_t bytes);

// How many blocks of its sums this process has written into the buffer of the member of rank
// `member` in direct all-reduces (for tests).
int64_t direct_blocks_written(int member);

// Makes this process's direct read or write after the next `after` fail as a refused one would
// (for tests).
void fail_direct_copy(int after = 0);
// Makes this process wait `milliseconds` before its next direct read (for tests).
void pause_direct_reads(int milliseconds);

}  // namespace nnx::detail
