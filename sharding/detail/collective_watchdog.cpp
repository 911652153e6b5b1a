// The watchdog: one thread, started with the first watched call, waking every 20 ms (a call
// registers without waking it: that would cost a context switch per collective). It holds the
// registry lock while it looks, so no call leaves (and no rank finalizes MPI) mid-look.
#include <nnx/sharding/detail/collective_watchdog.h>

#include <nnx/sharding/detail/collective_wait.h>
#include <nnx/sharding/detail/exit_protocol.h>
#include <nnx/sharding/detail/stall_probe.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace nnx::detail {

namespace {

using Clock = std::chrono::steady_clock;

struct Registry {
  std::mutex mutex;
  std::vector<WatchedEntry*> calls;  // the calls in flight, in no order
  bool thread_started = false;
};

Registry& registry() {
  static auto* r = new Registry;  // never destroyed: the thread may outlive static destructors
  return *r;
}

// One look at every call in flight (the registry lock held).
void look(Registry& r) {
  const auto now = Clock::now();
  const std::vector<int> departed = departed_ranks();
  for (WatchedEntry* call : r.calls) {
    WatchedEntry& e = *call;
    for (size_t k = 0; k < departed.size() && !e.departure_seen; ++k)
      if (is_member(e.comm, departed[k])) {
        e.departed_member = departed[k];
        e.departure_seen = now;
      }
    if (e.departure_seen && now - *e.departure_seen > std::chrono::seconds(2))
      abort_job(fmt::format("rank {} has left main while this rank waits in {} over '{}', which "
                            "it will never join; ending the job (a rank skipped a collective, or "
                            "returned early after an error)", e.departed_member, e.op, e.comm_name));
    const double waited = std::chrono::duration<double>(now - e.start).count();
    if (waited > collective_timeout_seconds())
      abort_job(fmt::format("{} over '{}' has waited {:.0f} s (NNX_COLLECTIVE_TIMEOUT): some rank "
                            "never reached it, or reached another collective; ending the job "
                            "({})",
                            e.op, e.comm_name, waited, timeout_hint()));
  }
  stall_probe_tick();
}

void watch() {
  Registry& r = registry();
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::lock_guard lock(r.mutex);
    if (!r.calls.empty()) look(r);
  }
}

}  // namespace

bool watchdog_available() {
  static const bool available = [] {
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    return level == MPI_THREAD_MULTIPLE;
  }();
  return available;
}

WatchedCall::WatchedCall(MPI_Comm comm, const char* op, const char* comm_name)
    : entry_{comm, op, comm_name, Clock::now(), std::nullopt, -1} {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (!r.thread_started) {
    std::thread(watch).detach();
    r.thread_started = true;
  }
  r.calls.push_back(&entry_);
}

WatchedCall::~WatchedCall() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = std::find(r.calls.begin(), r.calls.end(), &entry_);
  if (it != r.calls.end()) {
    *it = r.calls.back();
    r.calls.pop_back();
  }
}

}  // namespace nnx::detail
