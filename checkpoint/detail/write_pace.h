// Pacing for a background checkpoint writer: after each piece it writes, the thread sleeps `pace`
// times as long as the piece took, so it uses at most 1 / (1 + pace) of a core and training's
// steps keep theirs. Per thread; 0 (the default) never sleeps.
#pragma once

#include <cstdint>

namespace nnx::checkpoint::detail {

// Bytes per paced piece: checksummed and written, then the pause.
inline constexpr uint64_t kPacedPieceBytes = uint64_t{1} << 20;

void set_write_pace(double pace);
double write_pace();

}  // namespace nnx::checkpoint::detail
