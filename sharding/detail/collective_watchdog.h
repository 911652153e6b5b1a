// Blocking MPI collectives without hangs. Open MPI's blocking collectives use its tuned
// algorithms; the nonblocking ones (libnbc) take about twice as long for an all-reduce. So a
// collective runs as the blocking call while a watchdog thread looks at it, and ends the job on
// the same conditions as wait_for (collective_wait.h): NNX_COLLECTIVE_TIMEOUT, or a member of its
// communicator that left main two seconds ago. The watchdog needs MPI_THREAD_MULTIPLE; without
// it, callers use the nonblocking call and wait_for.
#pragma once

#include <mpi.h>

namespace nnx::detail {

// Whether blocking calls can be watched (MPI gives MPI_THREAD_MULTIPLE).
bool watchdog_available();

// Registers a blocking call on `comm` with the watchdog for this object's lifetime.
class WatchedCall {
 public:
  WatchedCall(MPI_Comm comm, const char* op, const char* comm_name);
  ~WatchedCall();
  WatchedCall(const WatchedCall&) = delete;
  WatchedCall& operator=(const WatchedCall&) = delete;

 private:
  void* entry_;
};

}  // namespace nnx::detail
