// The data phase of collectives that move data or sum it, read straight from the members' inputs:
// once every member has posted collective `sequence` with its input's address on the board,
// each member copies what it needs from the others' memory into its output (one copy, as MPI's
// shared-memory transport makes for large messages).
// - A collective that only reads (all-gather, reduce-scatter, all-to-all, broadcast): each member
//   acknowledges every input it is done reading, and returns (letting its own input change) once
//   all its readers have acknowledged its own, as MPI's pairwise transfers do; no member waits for
//   the others' other reads. A read the kernel refuses is asked of its member through MPI instead.
// - An all-reduce meets twice more: after summing its chunk of every member's buffer, and after
//   reading the others' sums. A member whose read fails says so at the meeting, and every member
//   throws.
#pragma once

#include <nnx/sharding/communicator.h>
#include <nnx/sharding/detail/fingerprint_board.h>

#include <c10/core/ScalarType.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace nnx::detail {

// How many collectives this process has run by direct reads (for tests).
int64_t direct_collectives_run();

// How many reads this process has asked of a member through MPI, the kernel having refused them
// (for tests).
int64_t direct_reads_asked();

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

// The two that only move data leave this member's own part of `out` to the meeting, which
// copied it while the others posted (OwnPart in fingerprint_board.h).
// out = every member's `bytes` in member order (`mine` is this member's input).
void direct_all_gather(const DirectCall& call, const void* mine, void* out, size_t bytes);
// Chunk m of out = chunk `me` of member m's input (`chunk_bytes` each).
void direct_all_to_all(const DirectCall& call, const void* mine, void* out, size_t chunk_bytes);
// out = the sum over members, in member order, of chunk `me` of their inputs (`numel` elements of
// `dtype` per chunk). A dtype combine.h has no loop for is an error on every member before any
// read (the dtype is agreed, so all leave together); so in direct_all_reduce.
void direct_reduce_scatter(const DirectCall& call, const void* mine, void* out, int64_t numel,
                           at::ScalarType dtype);
// Every member's `buffer` becomes the member-order combination by `op` of all members' buffers
// (`numel` elements of `dtype`). Each member sums one chunk from the others' buffers into its
// own, all meet at `sequence + 1`, each reads the others' sums, and all meet at `sequence + 2`.
void direct_all_reduce(const DirectCall& call, void* buffer, int64_t numel, at::ScalarType dtype,
                       ReduceOp op);
// out = the root's `bytes` (nothing to copy on the root, whose out is its input).
void direct_broadcast(const DirectCall& call, int root, void* out, size_t bytes);

// Makes this process's direct read after the next `after` fail as a refused one would (for
// tests).
void fail_direct_read(int after = 0);
// Makes this process wait `milliseconds` before its next direct read (for tests).
void pause_direct_reads(int milliseconds);

}  // namespace nnx::detail
