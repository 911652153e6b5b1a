// How a job ends when nnx started MPI: an uncaught error prints its message once, with the rank,
// and ends every rank with status 1; a rank that leaves main says goodbye to the others, so a
// rank waiting in a collective that the leaver will never join ends the job within seconds.
#pragma once

#include <string>

namespace nnx::detail {

// At MPI start-up (nnx's own): the terminate handler and the goodbye listener.
void start_exit_protocol();
// At exit: goodbyes, a barrier bounded by the collective timeout, then MPI_Finalize.
void finish_exit_protocol();
// The rank that has said goodbye while this one still runs, or -1.
int departed_rank();
// Prints "nnx: rank R: message" on stderr and ends the whole job with `status` (MPI_Abort).
[[noreturn]] void abort_job(const std::string& message, int status = 1);

}  // namespace nnx::detail
