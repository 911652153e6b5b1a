// Blocking MPI collectives without hangs. Open MPI's blocking collectives use its tuned
// algorithms; the nonblocking ones (libnbc) take about twice as long for an all-reduce. So a
// collective runs as the blocking call while a watchdog thread looks at it, and ends the job on
// the same conditions as wait_for (collective_wait.h): NNX_COLLECTIVE_TIMEOUT, or a member of its
// communicator that left main two seconds ago. The watchdog needs MPI_THREAD_MULTIPLE; without
// it, callers use the nonblocking call and wait_for.
#pragma once

#include <mpi.h>

#include <chrono>
#include <optional>

namespace nnx::detail {

// Whether blocking calls can be watched (MPI gives MPI_THREAD_MULTIPLE).
bool watchdog_available();

// A blocking call as the watchdog sees it; the names outlive the call.
struct WatchedEntry {
  MPI_Comm comm;
  const char* op;
  const char* comm_name;
  std::chrono::steady_clock::time_point start;
  std::optional<std::chrono::steady_clock::time_point> departure_seen;
  int departed_member = -1;
};

// Registers a blocking call on `comm` with the watchdog for this object's lifetime (the entry
// lives here, so registering allocates nothing).
class WatchedCall {
 public:
  WatchedCall(MPI_Comm comm, const char* op, const char* comm_name);
  ~WatchedCall();
  WatchedCall(const WatchedCall&) = delete;
  WatchedCall& operator=(const WatchedCall&) = delete;

 private:
  WatchedEntry entry_;
};

}  // namespace nnx::detail
