// Intra-op thread defaults (see threads.h).
#include <nnx/sharding/threads.h>

#include <nnx/core/error.h>

#include <ATen/Parallel.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

namespace nnx {
namespace {

std::atomic<bool> chosen_by_user{false};

// A positive integer from the environment, or 0 when unset; a bad value is an error.
int env_threads(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  NNX_CHECK(*end == '\0' && value > 0 && value <= 4096,
            "{}='{}' is not a thread count; set it to a positive integer or unset it", name, text);
  return static_cast<int>(value);
}

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// Ranks launched on this machine, as the MPI launchers announce them.
int local_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    if (const char* text = std::getenv(name)) {
      int value = std::atoi(text);
      if (value > 0) return value;
    }
  }
  return 1;
}

}  // namespace

void set_num_threads(int threads) {
  NNX_CHECK(threads > 0, "threads must be positive, got {}", threads);
  chosen_by_user = true;
  at::set_num_threads(threads);
}

int default_num_threads() {
  if (int n = env_threads("NNX_NUM_THREADS")) return n;
  if (int n = env_threads("OMP_NUM_THREADS")) return n;
  return std::max(1, usable_cores() / local_ranks());
}

namespace detail {

void apply_default_threads() {
  static std::atomic<bool> applied{false};
  if (chosen_by_user || applied.exchange(true)) return;
  at::set_num_threads(default_num_threads());
}

bool ranks_outnumber_cores() {
  static const bool outnumber =
      local_ranks() > static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return outnumber;
}

}  // namespace detail
}  // namespace nnx
