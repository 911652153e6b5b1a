// CheckpointManager: step directories, retention, and background saves on a duplicated world
// communicator (MPI_THREAD_MULTIPLE), so the training loop's collectives never meet them.
#include <nnx/checkpoint/file_io.h>
#include <nnx/checkpoint/manager.h>
#include <nnx/checkpoint/detail/save_plan.h>
#include <nnx/checkpoint/detail/write_pace.h>
#include <nnx/core/error.h>
#include <nnx/sharding/background_thread.h>
#include <nnx/sharding/world.h>

#include <mpi.h>
#include <sched.h>
#include <sys/resource.h>
#include <torch/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

namespace nnx::checkpoint {

namespace fs = std::filesystem;

// A background writer sleeps this many times as long as each piece it wrote took.
constexpr double kBackgroundWritePace = 3.0;

CheckpointManager::CheckpointManager(std::string dir, CheckpointManagerOptions options)
    : dir_(std::move(dir)), options_(options) {
  NNX_CHECK(options_.save_interval_steps >= 1, "save_interval_steps must be >= 1, got {}",
            options_.save_interval_steps);
  NNX_CHECK(options_.max_to_keep >= 0 && options_.keep_period >= 0,
            "max_to_keep ({}) and keep_period ({}) must not be negative", options_.max_to_keep,
            options_.keep_period);
  Communicator world = Communicator::world();
  if (options_.async) {
    int level = 0;
    MPI_Query_thread(&level);
    NNX_CHECK(level == MPI_THREAD_MULTIPLE,
              "asynchronous saves need an MPI library with MPI_THREAD_MULTIPLE (this one gives "
              "level {}); use {{.async = false}}",
              level);
  }
  comm_ = std::make_unique<Communicator>(world.duplicate("checkpoint"));
  std::string error;  // rank 0 creates the directory; a failure there is an error everywhere
  if (world.rank() == 0) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec) error = fmt::format("cannot create the checkpoint directory '{}': {}", dir_, ec.message());
  }
  detail::raise_if_any_failed(world, error);
  // The newest step any rank sees: every rank then skips the same steps.
  auto newest = torch::tensor({latest_step().value_or(-1)}, torch::kLong);
  world.all_reduce_(newest, ReduceOp::max);
  last_step_ = newest.item<int64_t>();
}

CheckpointManager::~CheckpointManager() {
  if (worker_.joinable()) worker_.join();
  if (error_) {
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[CheckpointManager] a background save failed: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "[CheckpointManager] a background save failed\n");
    }
  }
}

bool CheckpointManager::should_save(int64_t step) const {
  return step > last_step_ && step % options_.save_interval_steps == 0;
}

std::string CheckpointManager::step_dir(int64_t step) const {
  return dir_ + "/" + std::to_string(step);
}

void CheckpointManager::save_now(int64_t step, const Communicator& comm,
                                 const detail::SavePlan& plan, const SaveOptions& options) {
  detail::prepare_directory(comm, step_dir(step), options.overwrite);
  detail::write_and_commit(comm, step_dir(step), plan, options);
  if (comm.rank() == 0) apply_retention();
  comm.barrier();  // every rank sees the same steps once this save is done
}

std::exception_ptr CheckpointManager::join_worker() {
  if (worker_.joinable()) worker_.join();
  auto error = error_;
  error_ = nullptr;
  return error;
}

namespace {
// What a background save's error says.
std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an unknown error";
  }
}
}  // namespace

bool CheckpointManager::save(int64_t step, const State& state, const SaveOptions& options) {
  NNX_CHECK(step >= 0, "step must be >= 0, got {}", step);
  // A failed background save is reported after this step's save starts, so no step is lost.
  std::exception_ptr previous = join_worker();
  const bool saving = should_save(step);
  auto report_previous = [&] {
    if (!previous) return;
    NNX_FAIL("the previous background save failed: {} (step {} {})", message_of(previous), step,
             saving ? (options_.async ? "is being saved" : "was saved")
                    : step > last_step_ ? "was skipped by save_interval_steps"
                                        : "was skipped: not after the newest step");
  };
  if (!saving) {
    if (step <= last_step_ && step % options_.save_interval_steps == 0 && !skip_reported_ &&
        comm_->rank() == 0) {
      std::fprintf(stderr,
                   "[CheckpointManager] step %lld not saved: '%s' already holds step %lld; saves "
                   "resume after it (a new run wants a new directory)\n",
                   static_cast<long long>(step), dir_.c_str(), static_cast<long long>(last_step_));
      skip_reported_ = true;
    }
    report_previous();
    return false;
  }
  // Copies for a background write, so the caller may go on changing the state. Where this
  // step's save fails too, its error names the previous one, which is not lost.
  std::shared_ptr<detail::SavePlan> plan;
  try {
    detail::check_save_options(*comm_, options);
    plan = std::make_shared<detail::SavePlan>(
        detail::plan_save_everywhere(*comm_, state, options_.async));
    if (!options_.async) save_now(step, *comm_, *plan, options);
    last_step_ = step;
  } catch (const std::exception& e) {
    if (!previous) throw;
    NNX_FAIL("step {} was not saved: {}; and the previous background save failed too: {}", step,
             e.what(), message_of(previous));
  }
  if (!options_.async) {
    report_previous();
    return true;
  }
  worker_ = std::thread([this, step, plan, options] {
    // The writer runs only where a core is idle (SCHED_IDLE; where refused, the lowest nice) and
    // pauses after each piece it writes (write_pace.h): a step with a save in flight measured
    // 1.26-1.29x a plain one on 8 ranks sharing 2 cores with 1 MiB pieces, 1.12x with 256 KiB
    // ones, against 1.64-1.76x at full speed.
    sched_param idle{};
    if (sched_setscheduler(0, SCHED_IDLE, &idle) != 0)
      setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 19);
    detail::set_write_pace(kBackgroundWritePace);
    mark_background_thread();  // its collectives sleep while they wait, never spin
    try {
      save_now(step, *comm_, *plan, options);
    } catch (...) {
      error_ = std::current_exception();
    }
  });
  report_previous();
  return true;
}

void CheckpointManager::wait_until_finished() {
  if (auto error = join_worker()) std::rethrow_exception(error);
}

std::vector<int64_t> CheckpointManager::all_steps() const {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.size() > 18 ||
        !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    if (fs::exists(entry.path() / "manifest.json")) steps.push_back(std::stoll(name));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::optional<int64_t> CheckpointManager::latest_step() const {
  auto steps = all_steps();
  if (steps.empty()) return std::nullopt;
  return steps.back();
}

int64_t CheckpointManager::resolved(int64_t step) const {
  if (step != latest) return step;
  // Every rank must restore the same step, but listings can differ (a commit one node's file
  // system shows late, node-local directories): the highest and lowest answers must agree.
  const int64_t mine = latest_step().value_or(-1);
  auto seen = torch::tensor({mine, -mine}, torch::kLong);
  Communicator::world().all_reduce_(seen, ReduceOp::max);
  const int64_t highest = seen[0].item<int64_t>(), lowest = -seen[1].item<int64_t>();
  NNX_CHECK(highest == lowest,
            "the ranks see different latest checkpoints in '{}' (steps {} to {}; -1: none); "
            "restore an explicit step, or give every rank the same directory",
            dir_, lowest, highest);
  NNX_CHECK(mine >= 0, "'{}' holds no committed checkpoint to restore", dir_);
  return mine;
}

State CheckpointManager::restore(int64_t step, const State& target,
                                 const RestoreOptions& options) const {
  return checkpoint::restore(step_dir(resolved(step)), target, options);
}

nlohmann::json CheckpointManager::restore_per_rank(int64_t step) const {
  return checkpoint::restore_per_rank(step_dir(resolved(step)));
}

// Keeps the newest max_to_keep steps and every multiple of keep_period; a deleted step loses
// its manifest first, so a crash midway leaves an uncommitted directory, never a broken one.
void CheckpointManager::apply_retention() {
  if (options_.max_to_keep == 0) return;
  auto steps = all_steps();
  const int64_t excess = static_cast<int64_t>(steps.size()) - options_.max_to_keep;
  for (int64_t i = 0; i < excess; ++i) {
    const int64_t s = steps[i];
    if (options_.keep_period > 0 && s % options_.keep_period == 0) continue;
    // Best effort, never throwing: the other ranks have already returned from this save.
    const std::string dir = step_dir(s);
    std::error_code ec;
    fs::remove(dir + "/manifest.json", ec);
    if (!ec) {
      try {
        fsync_directory(dir);
      } catch (const std::exception&) {
      }
      fs::remove_all(dir, ec);
    }
    if (ec)
      std::fprintf(stderr, "[CheckpointManager] could not delete old checkpoint '%s': %s\n",
                   dir.c_str(), ec.message().c_str());
  }
}

}  // namespace nnx::checkpoint
