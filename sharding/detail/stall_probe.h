// Deadlocks across communicators, under the full collective check (NNX_CHECK_COLLECTIVES=1).
// The check compares calls within one communicator; ranks waiting in collectives over different
// communicators (one rank saving while another trains) never meet there. So once a collective
// has waited a second, its rank asks every rank where it waits. When every rank's own threads
// wait, and no collective has all its members, nothing can move: the job ends, listing each
// rank's collective and call site. A rank that computes does not answer, so nothing is decided
// while any rank may still arrive.
#pragma once

#include <nnx/sharding/detail/call_stack.h>

#include <cstdint>
#include <string>
#include <vector>

namespace nnx::detail {

// At MPI start-up, when nnx starts MPI (needs MPI_THREAD_MULTIPLE: answers come from the
// watchdog thread while the caller sits in a blocking collective).
void start_stall_probe();

// Registers this thread's collective for its lifetime, so that other ranks' questions see it.
// `members` are world ranks; `comm_key` is equal on every member and differs across
// communicators. `stack` (this thread's, may be null) outlives the registration.
class WaitingCollective {
 public:
  WaitingCollective(uint64_t comm_key, const std::vector<int>& members, std::string comm_name,
                    const char* op, uint64_t sequence, const CallStack* stack);
  ~WaitingCollective();
  WaitingCollective(const WaitingCollective&) = delete;
  WaitingCollective& operator=(const WaitingCollective&) = delete;

 private:
  void* entry_;
};

// Answers other ranks' questions and, when this rank's collective has waited long enough, asks
// its own; ends the job on a deadlock. Called by the waiting loops; cheap when nothing waits.
void stall_probe_tick();

}  // namespace nnx::detail
