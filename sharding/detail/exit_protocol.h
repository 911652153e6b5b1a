// How a job ends when nnx started MPI: an uncaught error prints its message once, with the rank,
// and ends every rank with status 1; a rank that leaves main says goodbye to the others, so a
// rank waiting in a collective that the leaver will never join ends the job within seconds.
#pragma once

#include <string>
#include <vector>

namespace nnx::detail {

// At MPI start-up (nnx's own): the terminate handler and the goodbye listener.
void start_exit_protocol();
// At exit: goodbyes, a barrier bounded by NNX_EXIT_TIMEOUT seconds (3600 by default: ranks may
// finish their own work at their own pace), then MPI_Finalize (unless the program did).
void finish_exit_protocol();
// The ranks that have said goodbye so far, in the order their goodbyes arrived.
std::vector<int> departed_ranks();
// Prints "nnx: rank R: message" on stderr and ends the whole job with `status` (MPI_Abort).
[[noreturn]] void abort_job(const std::string& message, int status = 1);

}  // namespace nnx::detail
