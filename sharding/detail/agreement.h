// The agreement every collective starts with: members check that they all make the same call
// (by fingerprint, in full in debug mode or when fingerprints differ), and choose together how its
// data moves: on the fingerprint board, through its staging area, by direct reads of each other's
// memory, or by the engine (MPI or NCCL).
#pragma once

#include <nnx/sharding/detail/comm_impl.h>
#include <nnx/sharding/detail/direct_collectives.h>

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <optional>

namespace nnx::detail {

// What a collective may put on the board: `bytes` from `data` (null: nothing to share, as for a
// broadcast's non-roots; bytes < 0: not on the board). Collectives that only move data
// (`moves_only`) use a quarter of the board's room: above that, MPI's single copy between
// processes beats the board's copy in and out. Above the room, members may read the input
// straight from each other's memory, meeting `direct_meetings` more times (-1: never direct).
struct BoardInput {
  const void* data = nullptr;
  int64_t bytes = -1;
  bool moves_only = false;
  int direct_meetings = -1;
  bool stageable = false;  // an all-reduce, which may go through the staging area instead
  bool gathers = false;    // an all-gather (board_room)
  // Bytes per element of the input's dtype: where a staged all-reduce's chunks start.
  size_t element_bytes = 1;
  // Where members read directly, the parts of a call that only moves data (an all-gather's or an
  // all-to-all's), some moved while the others post.
  MovedParts* moved = nullptr;
};

// All members must call the same collective on the same dtype and shape: checked by fingerprint
// always, and in full (every rank's call and, in debug mode, its call path) in debug mode or
// when fingerprints differ. In debug mode two calls of the same shape from different lines of the
// program differ too, and each rank's message names every rank's call site.
//
// A call that can move its data on the board passes its `input` (board_input): if the board has
// room, the input goes into this member's region before the fingerprint is posted, and agree
// returns the call's sequence number, at which every member's input is readable
// (board_collectives.h). A larger all-reduce that fits the staging area copies its input there
// (`through_staging`, staged_all_reduce.h). Other larger calls post their input's address, where
// members can read each other's memory (`direct`, direct_collectives.h). The later meetings of
// both take the next sequence numbers. Otherwise (nullopt) the engine moves the
// data. The choice is the same on every member: it depends on the fingerprint alone.
struct OnBoard {
  uint64_t sequence;
  bool direct;
  bool through_staging = false;
  MovedParts* moved = nullptr;  // BoardInput::moved, where direct
};

std::optional<OnBoard> agree(CommImpl& c, const char* op, const at::Tensor& t, int64_t extra,
                             const BoardInput& input = {});

// A contiguous input for agree(): CPU inputs may move on the board, not a device engine's, or be
// read directly by members that then meet `direct_meetings` more times (a collective that only
// reads meets no more: each member waits for its own readers instead).
constexpr int kAllReduceMeetings = 1;  // members finish once the sums have moved
BoardInput board_input(const DeviceEngine* engine, const at::Tensor& input, bool moves_only,
                       bool shared = true, int direct_meetings = 0);

// The parts of a direct all-gather or all-to-all (agree() set them wherever it chose direct reads
// for a call that passed them).
MovedParts& moved_parts(const OnBoard& on_board);
DirectCall direct_call(const CommImpl& c, uint64_t sequence, const char* op);
size_t input_bytes(const at::Tensor& t);

// The parts (BoardInput::moved) of an all-gather's output `out` of `local`, and of an
// all-to-all's output `out` of `send`.
MovedParts gathered_parts(const CommImpl& c, const at::Tensor& out, const at::Tensor& local);
MovedParts exchanged_parts(const CommImpl& c, const at::Tensor& out, const at::Tensor& send);
using PartsOf = MovedParts (*)(const CommImpl&, const at::Tensor& out, const at::Tensor& input);

// The parts of a call that only moves data, where no device engine moves it.
std::optional<MovedParts> parts_for(const DeviceEngine* engine, PartsOf parts_of,
                                    const CommImpl& c, const at::Tensor& out,
                                    const at::Tensor& input);
// board_input of a call that only moves data, with its parts (parts_for); `gathers` for an
// all-gather.
BoardInput moving_input(const DeviceEngine* engine, const at::Tensor& input,
                        std::optional<MovedParts>& parts, bool gathers);

}  // namespace nnx::detail
