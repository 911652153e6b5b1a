// MPI start-up on first use and the world's rank and size.
#include <nnx/sharding/communicator.h>
#include <nnx/sharding/detail/allocator_tuning.h>
#include <nnx/sharding/detail/exit_protocol.h>
#include <nnx/sharding/detail/stall_probe.h>
#include <nnx/sharding/threads.h>
#include <nnx/sharding/world.h>

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

namespace nnx {

namespace detail {

void ensure_mpi() {
  apply_default_threads();
  tune_allocator_once();
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE)
    std::fprintf(stderr, "nnx: this MPI library gives thread level %d, not MPI_THREAD_MULTIPLE; "
                         "asynchronous checkpoint saves will be refused\n", provided);
  start_exit_protocol();
  start_stall_probe();
  std::atexit(finish_exit_protocol);
}

}  // namespace detail

int world_rank() { return Communicator::world().rank(); }
int world_size() { return Communicator::world().size(); }

}  // namespace nnx
