// The latest checkpoint step of a run directory, or an error that names the flag that needed it;
// and a fresh run's clean start.
#pragma once

#include <nnx/nnx.h>

#include <fmt/format.h>

#include <filesystem>
#include <string>

namespace examples {

inline int64_t latest_step_or_fail(const nnx::checkpoint::CheckpointManager& manager,
                                   const std::string& flag, const std::string& dir) {
  auto step = manager.latest_step();
  if (!step) NNX_FAIL("{}: no checkpoint in {}", flag, dir);
  return *step;
}

// A fresh run replaces the checkpoints an earlier run left in `dir`, as it replaces its logs:
// the manager saves no step at or before the newest it finds, so they would stand in for this
// run's. Rank 0 removes them, saying so; every rank waits before it opens the manager.
inline void start_fresh(const std::filesystem::path& dir, bool lead) {
  if (lead && std::filesystem::exists(dir) && !std::filesystem::is_empty(dir)) {
    fmt::print("replacing the checkpoints of an earlier run in {} (--resume continues it)\n",
               dir.string());
    std::filesystem::remove_all(dir);
  }
  nnx::Communicator::world().barrier();
}

}  // namespace examples
