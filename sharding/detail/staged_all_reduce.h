// An all-reduce through the board's staging area, for inputs too large for the board's regions
// and small enough that every member's input and the sums fit the area: each member copies its
// input, all but the chunk it sums itself, into its slot of the area before it posts the call, so
// the fingerprint meeting is also the moment every input is readable. Each member then sums its
// chunk of every input (its own from its buffer), in member order, into the sums slot at the
// chunk's offset, the members meet once more, and each copies every chunk's sum into its buffer.
// Every copy is a memcpy between shared and private memory, where a kernel read
// (direct_collectives.h) costs about three times as much per byte.
//
// The slots are fixed, whatever a call's size. A member writes its input slot for the next call
// only after this call's second meeting, when every member is done reading the inputs, and the
// sums slot only after the next call's fingerprint meeting, when every member is done copying.
#pragma once

#include <nnx/sharding/communicator.h>
#include <nnx/sharding/detail/fingerprint_board.h>

#include <mpi.h>

#include <c10/core/ScalarType.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace nnx::detail {

// Meetings a staged all-reduce holds after its fingerprint's, each taking the next sequence.
constexpr int kStagedAllReduceMeetings = 1;

// How many all-reduces this process has run through the staging area whole (for tests).
int64_t staged_all_reduces_run();

// Whether an all-reduce of `bytes` per member fits a slot of `board`'s staging area.
bool fits_staging(const FingerprintBoard& board, int members, size_t bytes);
// Where member `member` of `members` leaves its input before it posts.
void* staged_input(const FingerprintBoard& board, int members, int member);
// Copies into member `me`'s slot the chunks of its input `data` (`bytes`, in elements of
// `element_bytes`) that the other members sum: its own chunk is summed from its buffer.
void stage_input(const FingerprintBoard& board, int members, int me, const void* data,
                 size_t bytes, size_t element_bytes);

// After every member has posted collective `sequence` with its input staged: `buffer` (`numel`
// elements of `dtype`, this member's own input) becomes the member-order combination of all.
void staged_all_reduce(FingerprintBoard& board, uint64_t sequence, int members, int me,
                       void* buffer, int64_t numel, at::ScalarType dtype, ReduceOp op,
                       MPI_Comm comm, const std::string& comm_name);

}  // namespace nnx::detail
