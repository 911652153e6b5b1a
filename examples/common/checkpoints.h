// The latest checkpoint step of a run directory, or an error that names the flag that needed it.
#pragma once

#include <nnx/nnx.h>

#include <string>

namespace examples {

inline int64_t latest_step_or_fail(const nnx::checkpoint::CheckpointManager& manager,
                                   const std::string& flag, const std::string& dir) {
  auto step = manager.latest_step();
  if (!step) NNX_FAIL("{}: no checkpoint in {}", flag, dir);
  return *step;
}

}  // namespace examples
