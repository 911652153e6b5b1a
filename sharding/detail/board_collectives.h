// The data phase of small collectives on a fingerprint board: once every member has posted
// collective `sequence`, each member's input lies in its region and each reads what it needs.
// Reductions combine the members in member order, so every member gets the same bits.
#pragma once

#include <nnx/sharding/communicator.h>
#include <nnx/sharding/detail/fingerprint_board.h>

#include <c10/core/ScalarType.h>

#include <cstddef>
#include <cstdint>

namespace nnx::detail {

// How many collectives this process has run on a board (for tests).
int64_t board_collectives_run();

// out[i] = op over members of their element i (`numel` elements of `dtype`).
void board_all_reduce(const FingerprintBoard& board, uint64_t sequence, int members, void* out,
                      int64_t numel, at::ScalarType dtype, ReduceOp op);
// out = every member's `bytes` in member order.
void board_all_gather(const FingerprintBoard& board, uint64_t sequence, int members, void* out,
                      size_t bytes);
// out = the sum over members of chunk `me` of their inputs (`numel` elements per chunk).
void board_reduce_scatter(const FingerprintBoard& board, uint64_t sequence, int members, int me,
                          void* out, int64_t numel, at::ScalarType dtype);
// Chunk m of out = chunk `me` of member m's input (`chunk_bytes` each).
void board_all_to_all(const FingerprintBoard& board, uint64_t sequence, int members, int me,
                      void* out, size_t chunk_bytes);

// out = the root's `bytes` (a no-op on the root, whose out is its input).
void board_broadcast(const FingerprintBoard& board, uint64_t sequence, int root, int me,
                     void* out, size_t bytes);

}  // namespace nnx::detail
