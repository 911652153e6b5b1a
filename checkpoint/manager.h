// CheckpointManager: numbered checkpoints under one directory (dir/<step>), with retention and
// asynchronous saves, as Orbax's CheckpointManager:
//   nnx::checkpoint::CheckpointManager ckpt("runs/a", {.max_to_keep = 3, .async = true});
//   ckpt.save(step, nnx::checkpoint::combine({{"model", nnx::state(model)}, {"opt", opt.state()}}));
//   auto restored = ckpt.restore(nnx::checkpoint::latest, target);
#pragma once

#include <nnx/checkpoint/checkpoint.h>
#include <nnx/sharding/communicator.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace nnx::checkpoint {

namespace detail {
struct SavePlan;
}

inline constexpr int64_t latest = -1;

struct CheckpointManagerOptions {
  int max_to_keep = 0;              // newest checkpoints kept; 0 keeps all
  int64_t save_interval_steps = 1;  // save() skips steps that are not multiples of this
  int64_t keep_period = 0;          // steps that are multiples of this are never deleted
  bool async = false;               // write on a background thread with its own communicator
};

class CheckpointManager {
 public:
  // Collective (every rank constructs it, in the same order).
  explicit CheckpointManager(std::string dir, CheckpointManagerOptions options = {});
  ~CheckpointManager();  // waits for a save in flight (its error, if any, is only logged)
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  // Whether save(step) saves: `step` is a multiple of save_interval_steps and after every step
  // this manager has saved or found (the newest in the directory, on any rank, when it was made),
  // as Orbax's: a run pointed at a directory of a later run's steps saves nothing older.
  bool should_save(int64_t step) const;
  // Saves `state` as `step` unless should_save says not (then returns false; rank 0 says why
  // once where an older step is skipped). Async: copies the
  // blocks to host memory and returns; the write and commit happen in the background. An error
  // of the previous background save is thrown by wait_until_finished, or here once this step's
  // save has been made or started.
  bool save(int64_t step, const State& state, const SaveOptions& options = {});
  // `step` or `latest` (collective: every rank must see the same latest step); errors when
  // there is none.
  State restore(int64_t step, const State& target, const RestoreOptions& options = {}) const;
  nlohmann::json restore_per_rank(int64_t step) const;

  // Committed steps only (a directory whose manifest is missing is not a checkpoint).
  std::optional<int64_t> latest_step() const;
  std::vector<int64_t> all_steps() const;
  std::string step_dir(int64_t step) const;
  void wait_until_finished();

 private:
  void save_now(int64_t step, const Communicator& comm, const detail::SavePlan& plan,
                const SaveOptions& options);
  void apply_retention();  // on rank 0 after a commit; never throws
  std::exception_ptr join_worker();  // the background save's error, if any, taken
  int64_t resolved(int64_t step) const;  // `latest` as a step number

  std::string dir_;
  CheckpointManagerOptions options_;
  std::unique_ptr<Communicator> comm_;  // background saves' own communicator
  std::thread worker_;
  std::exception_ptr error_;
  int64_t last_step_ = -1;  // the newest step saved, or found at construction (-1: none)
  bool skip_reported_ = false;
};

}  // namespace nnx::checkpoint
