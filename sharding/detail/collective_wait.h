// Waiting for a nonblocking MPI operation without ever hanging: ends the job with a message when
// the wait exceeds NNX_COLLECTIVE_TIMEOUT seconds (300 by default), or when another rank has
// left main and the operation over a communicator it belongs to still has not completed two
// seconds later.
#pragma once

#include <mpi.h>

#include <functional>

namespace nnx::detail {

// Like MPI_Wait for an operation on `comm`; `op` and `comm_name` name the call in the message.
// `watch_departures`: end the job if a member of `comm` has left main (not for the exit barrier).
// `timeout_seconds`: 0 means collective_timeout_seconds().
void wait_for(MPI_Request* request, MPI_Comm comm, const char* op, const char* comm_name,
              bool watch_departures = true, double timeout_seconds = 0);
// The same wait for any condition: `done` is polled until it returns true. Every few hundred
// polls the wait yields the core, or calls `idle` where given (which may sleep briefly).
// `departure_matters(member)`, where given, says whether a member (its rank in `comm`) that has
// left main could still be waited for (one that has already done its part could not).
void wait_until(const std::function<bool()>& done, MPI_Comm comm, const char* op,
                const char* comm_name, bool watch_departures = true, double timeout_seconds = 0,
                const std::function<void()>& idle = {},
                const std::function<bool(int)>& departure_matters = {});
// Collectives of this thread wait lazily: started nonblocking and tested every 200 us in between
// sleeps instead of spinning (a background thread, such as the checkpoint writer, then leaves
// the cores to training while other ranks catch up).
void set_lazy_waits(bool lazy);
bool lazy_waits();

// Whether world rank `world_rank` is a member of `comm`.
bool is_member(MPI_Comm comm, int world_rank);
// Seconds a collective may wait: NNX_COLLECTIVE_TIMEOUT, else 300.
double collective_timeout_seconds();
// The end of a timeout's message: what to try next, given whether the full check is on.
const char* timeout_hint();

}  // namespace nnx::detail
