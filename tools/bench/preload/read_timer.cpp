// Times every process_vm_readv of a program, by caller (MPI's shared-memory transport, or the
// program itself, where nnx's direct collectives live) and by size. Preload it under mpirun:
//   mpirun -np 4 -x LD_PRELOAD=build/tools/bench/libnnx_read_timer.so bench_collectives ...
// Each rank prints, at exit, the reads' count and their thread CPU and wall time per read.
#include <dlfcn.h>
#include <sys/uio.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

namespace {

using ReadFn = ssize_t (*)(pid_t, const iovec*, unsigned long, const iovec*, unsigned long,
                           unsigned long);

// Reads of one caller and one size.
struct Tally {
  bool mpi = false;
  size_t bytes = 0;
  long reads = 0;
  double cpu_us = 0, wall_us = 0;
};
constexpr size_t kTallies = 64;
std::array<Tally, kTallies> tallies;  // the first kTallies (caller, size) pairs seen
size_t used = 0;
std::mutex tallies_mutex;

double now_us(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) * 1e-3;
}

// Whether the code at `address` belongs to Open MPI (libmpi, libopen-pal, or an mca_ plugin).
bool from_mpi(void* address) {
  Dl_info info{};
  if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) return false;
  for (const char* name : {"libmpi", "libopen-pal", "mca_"})
    if (std::strstr(info.dli_fname, name) != nullptr) return true;
  return false;
}

Tally* tally_of(bool mpi, size_t bytes) {
  for (size_t i = 0; i < used; ++i)
    if (tallies[i].mpi == mpi && tallies[i].bytes == bytes) return &tallies[i];
  if (used == kTallies) return nullptr;
  tallies[used] = Tally{mpi, bytes};
  return &tallies[used++];
}

__attribute__((destructor)) void report() {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  for (size_t i = 0; i < used; ++i) {
    const Tally& t = tallies[i];
    std::fprintf(stderr,
                 "read_timer rank %s %s: %ld reads of %zu bytes, %.1f us CPU and %.1f us wall "
                 "per read\n",
                 rank != nullptr ? rank : "-", t.mpi ? "mpi" : "program", t.reads, t.bytes,
                 t.cpu_us / static_cast<double>(t.reads), t.wall_us / static_cast<double>(t.reads));
  }
}

}  // namespace

extern "C" ssize_t process_vm_readv(pid_t pid, const iovec* local, unsigned long local_count,
                                    const iovec* remote, unsigned long remote_count,
                                    unsigned long flags) {
  static const auto real = reinterpret_cast<ReadFn>(dlsym(RTLD_NEXT, "process_vm_readv"));
  const bool mpi = from_mpi(__builtin_return_address(0));
  const double cpu = now_us(CLOCK_THREAD_CPUTIME_ID), wall = now_us(CLOCK_MONOTONIC);
  const ssize_t read = real(pid, local, local_count, remote, remote_count, flags);
  if (read > 0) {
    const std::lock_guard<std::mutex> lock(tallies_mutex);
    if (Tally* t = tally_of(mpi, static_cast<size_t>(read))) {
      ++t->reads;
      t->cpu_us += now_us(CLOCK_THREAD_CPUTIME_ID) - cpu;
      t->wall_us += now_us(CLOCK_MONOTONIC) - wall;
    }
  }
  return read;
}
