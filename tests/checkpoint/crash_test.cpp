// Crash consistency: a saver killed with SIGKILL at random points never leaves a checkpoint that
// latest_step offers but cannot restore; every committed step restores its exact values.
#include "checkpoint_test_util.h"
#include "crash_state.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

namespace ckpt = nnx::checkpoint;

namespace {

// The saver (crash_saver.cpp), as a process of its own: without this process's MPI job
// variables, so that it starts as a job of one.
pid_t start_saver(const std::string& dir) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    const bool job = entry.rfind("OMPI_", 0) == 0 || entry.rfind("PMIX_", 0) == 0 ||
                     entry.rfind("ORTE_", 0) == 0 || entry.rfind("OPAL_", 0) == 0;
    // Kept: where Open MPI lives when it is not in its built-in prefix, and the launcher and
    // transport settings of the machine (without ssh, a singleton needs its plm setting).
    const bool allowed = entry.rfind("OMPI_ALLOW_RUN_AS_ROOT", 0) == 0 ||
                         entry.rfind("OPAL_PREFIX=", 0) == 0 ||
                         entry.rfind("OMPI_MCA_plm", 0) == 0 || entry.rfind("OMPI_MCA_btl", 0) == 0;
    if (!job || allowed) env.push_back(entry);
  }
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string saver = nnx_test::helper_path("NNX_CRASH_SAVER", NNX_CRASH_SAVER);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execle(saver.c_str(), saver.c_str(), dir.c_str(), static_cast<char*>(nullptr),
             envp.data());
    ::_exit(127);
  }
  return pid;
}

}  // namespace

TEST_CASE("a saver killed at random points leaves only restorable checkpoints") {
  nnx_test::SharedDir dir;
  std::mt19937 random(20261122);
  // At least 20 kills, and more (up to 60) until 5 have cut a save short: where the kills land
  // depends on how long each phase of a save takes on the machine at that moment.
  int killed_mid_save = 0, trial = 0;
  const int wanted_mid_save = 5;
  for (; trial < 20 || (killed_mid_save < wanted_mid_save && trial < 60); ++trial) {
    INFO("trial " << trial);
    auto before = ckpt::CheckpointManager(dir.path()).latest_step();
    pid_t pid = start_saver(dir.path());
    REQUIRE(pid > 0);
    // Wait for this saver's first commit, then kill it somewhere in the following saves.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (ckpt::CheckpointManager(dir.path()).latest_step() == before &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::this_thread::sleep_for(std::chrono::microseconds(random() % 40000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    REQUIRE(WIFSIGNALED(status));

    ckpt::CheckpointManager manager(dir.path());
    auto latest = manager.latest_step();
    REQUIRE(latest.has_value());
    CHECK(latest > before);
    for (int64_t step : manager.all_steps()) {
      INFO("step " << step);
      auto restored = manager.restore(step, nnx_test::crash_state(0));
      nnx_test::check_bitwise_equal(nnx_test::whole_values(nnx_test::crash_state(step)),
                                    nnx_test::whole_values(restored));
    }
    // Was a save cut short? Its directory is there without a manifest.
    if (std::filesystem::exists(manager.step_dir(*latest + 1))) ++killed_mid_save;
  }
  INFO(killed_mid_save << " of " << trial << " kills interrupted a save");
  CHECK(killed_mid_save >= wanted_mid_save);
}
