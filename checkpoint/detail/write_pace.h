// Pacing for a background checkpoint writer: after each piece it writes, the thread sleeps `pace`
// times as long as the piece took, so it uses at most 1 / (1 + pace) of a core and training's
// steps keep theirs. Per thread; 0 (the default) never sleeps.
#pragma once

#include <cstdint>

namespace nnx::checkpoint::detail {

// Bytes per paced piece: checksummed and written, then the pause. With 256 KiB pieces a step on 8
// ranks sharing 2 cores took 1.12x a plain one while a save was in flight (median of 24 saves),
// against 1.20x with 1 MiB pieces; 32-128 KiB did no better and lengthened the save.
inline constexpr uint64_t kPacedPieceBytes = uint64_t{256} << 10;

void set_write_pace(double pace);
double write_pace();
// The pauses this thread's paced writes have taken (one after each piece).
void count_paced_pause();
int64_t paced_pauses();

}  // namespace nnx::checkpoint::detail
