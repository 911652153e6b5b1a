// Running one MPI collective of a communicator without hanging.
#pragma once

#include <nnx/sharding/detail/collective_wait.h>
#include <nnx/sharding/detail/collective_watchdog.h>
#include <nnx/sharding/detail/comm_impl.h>

#include <mpi.h>

#include <string>

namespace nnx::detail {

// Throws naming `what` and MPI's message unless `code` is MPI_SUCCESS.
void check_mpi(int code, const char* what);

// Whether this thread's collectives make blocking calls under the watchdog.
bool blocking_calls();

// Runs an MPI collective without hanging: `call(nullptr)` makes the blocking call, watched by the
// watchdog (collective_watchdog.h); without one, `call(&request)` starts the nonblocking call and
// wait_for waits for it.
template <class Call>
void run_mpi(const CommImpl& c, const std::string& comm_name, const char* op, Call call) {
  if (blocking_calls()) {
    WatchedCall watched(c.comm, op, comm_name.c_str());
    check_mpi(call(nullptr), op);
    return;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(call(&request), op);
  wait_for(&request, c.comm, op, comm_name.c_str());
}

}  // namespace nnx::detail
