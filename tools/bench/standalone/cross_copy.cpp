// Pull against push between two processes: each copies its input into the other's output, by
// reading the other's input (process_vm_readv, as nnx's direct all-gathers do) or by writing its
// own into the other's output (process_vm_writev). Then each reads its output, as a consumer would.
// Usage: bench_cross_copy [max bytes=64 MiB] [min bytes=64 KiB] (sizes x4). Prints JSON lines.
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "../bench_util.h"

namespace {

using nnx_bench::median;

// What the two processes share: a barrier, a failure flag, and each one's pid and buffers.
struct Shared {
  std::atomic<int> arrived{0};
  std::atomic<int> generation{0};
  std::atomic<bool> failed{false};
  pid_t pid[2];
  char* input[2];
  char* output[2];
};

void barrier(Shared& shared) {
  const int generation = shared.generation.load();
  if (shared.arrived.fetch_add(1) == 1) {
    shared.arrived.store(0);
    shared.generation.fetch_add(1);
    return;
  }
  while (shared.generation.load() == generation) {
    if (shared.failed.load()) std::exit(1);  // the other could not copy: it said why
    std::this_thread::yield();
  }
}

// Microseconds per copy (median over `calls`) of member `me` for one way and input policy.
double time_copies(Shared& shared, int me, size_t bytes, bool push, bool fresh, int calls) {
  const int other = 1 - me;
  std::vector<double> times;
  volatile long sink = 0;
  for (int call = -3; call < calls; ++call) {
    if (fresh) std::memset(shared.input[me], call & 0xff, bytes);
    barrier(shared);
    const auto start = std::chrono::steady_clock::now();
    iovec local{}, remote{};
    ssize_t copied = 0;
    if (push) {
      local = {shared.input[me], bytes};
      remote = {shared.output[other], bytes};
      copied = process_vm_writev(shared.pid[other], &local, 1, &remote, 1, 0);
    } else {
      local = {shared.output[me], bytes};
      remote = {shared.input[other], bytes};
      copied = process_vm_readv(shared.pid[other], &local, 1, &remote, 1, 0);
    }
    if (copied != static_cast<ssize_t>(bytes)) {
      std::perror(push ? "process_vm_writev" : "process_vm_readv");
      shared.failed.store(true);
      std::exit(1);
    }
    barrier(shared);  // the output is complete once both have copied
    long sum = 0;
    for (size_t i = 0; i < bytes; i += 64) sum += shared.output[me][i];
    sink = sink + sum;
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    if (call >= 0) times.push_back(us);
  }
  return median(times);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t max_bytes = argc > 1 ? std::stoull(argv[1]) : size_t{64} << 20;
  const size_t min_bytes = argc > 2 ? std::stoull(argv[2]) : size_t{64} << 10;
  void* memory = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                      -1, 0);
  if (memory == MAP_FAILED) return std::perror("mmap"), 1;
  auto& shared = *new (memory) Shared();
  const pid_t child = fork();
  if (child < 0) return std::perror("fork"), 1;
  const int me = child == 0 ? 1 : 0;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const int calls = static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / bytes, 9, 301));
    const size_t pages = (bytes + 4095) / 4096 * 4096;  // aligned_alloc wants whole alignments
    auto* input = static_cast<char*>(std::aligned_alloc(4096, pages));
    auto* output = static_cast<char*>(std::aligned_alloc(4096, pages));
    std::memset(input, me + 1, bytes);
    std::memset(output, 0, bytes);
    shared.pid[me] = getpid();
    shared.input[me] = input;
    shared.output[me] = output;
    barrier(shared);
    for (const bool fresh : {false, true}) {
      // The two ways alternate in rounds, so drift touches both alike.
      std::vector<double> pulls, pushes;
      for (int round = 0; round < 3; ++round) {
        pulls.push_back(time_copies(shared, me, bytes, false, fresh, calls / 3));
        pushes.push_back(time_copies(shared, me, bytes, true, fresh, calls / 3));
      }
      const double pull = median(pulls), push = median(pushes);
      if (me == 0)
        std::printf("{\"bench\": \"cross_copy\", \"bytes\": %zu, \"inputs\": \"%s\", "
                    "\"pull_us\": %.1f, \"push_us\": %.1f, \"push_over_pull\": %.3f}\n",
                    bytes, fresh ? "fresh" : "kept", pull, push, push / pull);
    }
    barrier(shared);  // neither frees its buffers while the other may still copy
    std::free(input);
    std::free(output);
  }
  if (child != 0) waitpid(child, nullptr, 0);
  return 0;
}
