// wait_for and wait_until: the test in a loop, looking at the clock and at departed ranks every
// few hundred tests, so the common case costs what MPI_Wait costs.
#include <nnx/sharding/communicator.h>
#include <nnx/sharding/detail/collective_wait.h>

#include <nnx/sharding/detail/exit_protocol.h>
#include <nnx/sharding/detail/stall_probe.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace nnx::detail {

double collective_timeout_seconds() {
  static const double seconds = [] {
    const char* env = std::getenv("NNX_COLLECTIVE_TIMEOUT");
    if (env == nullptr || *env == '\0') return 300.0;
    char* end = nullptr;
    double value = std::strtod(env, &end);
    return (*end == '\0' && value > 0) ? value : 300.0;
  }();
  return seconds;
}

namespace {
thread_local bool lazy = false;
}  // namespace

void set_lazy_waits(bool on) { lazy = on; }
bool lazy_waits() { return lazy; }

namespace {

// World rank `world_rank`'s rank in `comm`, or -1 where it is not a member.
int rank_in(MPI_Comm comm, int world_rank) {
  MPI_Group world_group, group;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Comm_group(comm, &group);
  int translated = MPI_UNDEFINED;
  MPI_Group_translate_ranks(world_group, 1, &world_rank, group, &translated);
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  return translated == MPI_UNDEFINED ? -1 : translated;
}

}  // namespace

bool is_member(MPI_Comm comm, int world_rank) { return rank_in(comm, world_rank) >= 0; }

void wait_for(MPI_Request* request, MPI_Comm comm, const char* op, const char* comm_name,
              bool watch_departures, double timeout_seconds) {
  auto finished = [request] {
    int done = 0;
    MPI_Test(request, &done, MPI_STATUS_IGNORE);
    return done != 0;
  };
  wait_until(finished, comm, op, comm_name, watch_departures, timeout_seconds);
}

void wait_until(const std::function<bool()>& done, MPI_Comm comm, const char* op,
                const char* comm_name, bool watch_departures, double timeout_seconds,
                const std::function<void()>& idle,
                const std::function<bool(int)>& departure_matters) {
  auto matters = [&](int world_rank) {
    const int member = rank_in(comm, world_rank);
    return member >= 0 && (!departure_matters || departure_matters(member));
  };
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const double timeout = timeout_seconds > 0 ? timeout_seconds : collective_timeout_seconds();
  bool departure_seen = false;
  Clock::time_point departure_time{};
  int departed_member = -1;
  size_t departures_checked = 0;
  for (unsigned spins = 0;; ++spins) {
    if (done()) return;
    if (lazy) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    } else {
      if (spins % 256 != 255) continue;
      if (idle)
        idle();
      else
        std::this_thread::yield();  // ranks may share cores
    }
    if (watch_departures) stall_probe_tick();
    const auto now = Clock::now();
    if (watch_departures && !departure_seen) {
      const std::vector<int> departed = departed_ranks();
      for (; departures_checked < departed.size() && !departure_seen; ++departures_checked)
        if (matters(departed[departures_checked])) {
          departed_member = departed[departures_checked];
          departure_seen = true;
          departure_time = now;
        }
    }
    // Looked at again before ending the job: what the member did before it left may have come
    // into view since.
    const bool waited_out = departure_seen && now - departure_time > std::chrono::seconds(2);
    if (waited_out && !matters(departed_member)) departure_seen = false;
    if (waited_out && departure_seen)
      abort_job(fmt::format("rank {} has left main while this rank waits in {} over '{}', which "
                            "it will never join; ending the job (a rank skipped a collective, or "
                            "returned early after an error)", departed_member, op, comm_name));
    if (std::chrono::duration<double>(now - start).count() > timeout)
      abort_job(fmt::format("{} over '{}' has waited {:.0f} s (NNX_COLLECTIVE_TIMEOUT): some rank "
                            "never reached it, or reached another collective; ending the job "
                            "({})", op, comm_name, timeout, timeout_hint()));
  }
}

const char* timeout_hint() {
  return Communicator::checking()
             ? "the calls compared so far agreed across ranks: some rank may wait in a collective "
               "over another communicator or mesh, or never have reached one"
             : "NNX_CHECK_COLLECTIVES=1 compares the calls, with their call sites";
}

}  // namespace nnx::detail
