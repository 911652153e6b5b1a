// The stall probe: questions and answers on a duplicate of the world communicator. A round asks
// every other rank; an answer lists the answering rank's waiting collectives. Two complete rounds
// in a row that show the same deadlock end the job (one round may mix moments).
#include <nnx/sharding/detail/stall_probe.h>

#include <nnx/sharding/communicator.h>
#include <nnx/sharding/detail/collective_wait.h>
#include <nnx/sharding/detail/exit_protocol.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <list>
#include <map>
#include <mutex>
#include <sstream>

namespace nnx::detail {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kQuestionTag = 91, kAnswerTag = 92;
constexpr auto kAskAfter = std::chrono::seconds(1);
constexpr auto kBetweenRounds = std::chrono::milliseconds(500);
constexpr auto kBetweenTicks = std::chrono::milliseconds(10);

struct Waiting {
  uint64_t comm_key;
  std::vector<int> members;
  std::string comm_name;
  const char* op;
  uint64_t sequence;
  const CallStack* stack;
  std::string call_site;  // the recorded line, taken on the calling thread
  bool background;        // a marked background thread: its rank may still be computing
  Clock::time_point since;
};

// One rank's answer, parsed.
struct Answer {
  uint64_t entered = 0;
  struct Entry {
    uint64_t comm_key, sequence;
    bool background;
    std::vector<int> members;
    std::string description;
  };
  std::vector<Entry> entries;
};

struct Probe {
  std::mutex mutex;
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  std::list<Waiting> waiting;
  uint64_t entered = 0;  // collectives registered so far: moves whenever this rank progresses
  Clock::time_point last_tick{};
  int64_t round = 0;          // the round in flight (0: none); ids are rank * 2^40 + count
  int64_t rounds_asked = 0;
  Clock::time_point round_end{};
  std::map<int, Answer> answers;
  std::string previous_deadlock;  // the last complete round's deadlock, canonical form
  std::list<std::pair<MPI_Request, std::string>> sends;
};

Probe& probe() {
  static auto* p = new Probe;  // never destroyed: the watchdog thread may outlive statics
  return *p;
}

// The frame that called into nnx, for a collective with no recorded line.
std::string caller_frame(const CallStack* stack) {
  if (stack == nullptr) return "";
  if (!stack->origin.empty()) return "in " + stack->origin;
  for (void* address : stack->addresses) {
    std::string frame = describe_frame(address);
    if (!frame.starts_with("nnx::") && !frame.starts_with("void nnx::") &&
        frame.find("libnnx") == std::string::npos && !frame.starts_with("backtrace"))
      return "in " + frame;
  }
  return "";
}

std::string describe_wait(const Waiting& w) {
  std::string site = w.call_site.empty() ? caller_frame(w.stack) : "from " + w.call_site;
  return fmt::format("{} #{} over '{}' (ranks {}){}{}{}", w.op, w.sequence, w.comm_name,
                     fmt::join(w.members, ","), site.empty() ? "" : ", ", site,
                     w.background ? " [background thread]" : "");
}

// "entered\n" then one line per waiting collective: key sequence background members|description
std::string my_state(Probe& p) {
  std::string out = fmt::format("{}\n", p.entered);
  for (const Waiting& w : p.waiting) {
    std::string text = describe_wait(w);
    std::replace(text.begin(), text.end(), '\n', ' ');
    out += fmt::format("{} {} {} {}|{}\n", w.comm_key, w.sequence, w.background ? 1 : 0,
                       fmt::join(w.members, ","), text);
  }
  return out;
}

Answer parse(const std::string& text) {
  Answer a;
  std::istringstream in(text);
  std::string line;
  if (std::getline(in, line)) a.entered = std::stoull(line);
  while (std::getline(in, line)) {
    const auto bar = line.find('|');
    if (bar == std::string::npos) continue;
    std::istringstream head(line.substr(0, bar));
    Answer::Entry e{};
    int background = 0;
    std::string members;
    head >> e.comm_key >> e.sequence >> background >> members;
    e.background = background != 0;
    std::istringstream list(members);
    for (std::string m; std::getline(list, m, ',');) e.members.push_back(std::stoi(m));
    e.description = line.substr(bar + 1);
    a.entries.push_back(std::move(e));
  }
  return a;
}

void send(Probe& p, int to, int tag, std::string bytes) {
  p.sends.emplace_back(MPI_REQUEST_NULL, std::move(bytes));
  auto& [request, buffer] = p.sends.back();
  MPI_Isend(buffer.data(), static_cast<int>(buffer.size()), MPI_CHAR, to, tag, p.comm, &request);
}

void reap_sends(Probe& p) {
  for (auto it = p.sends.begin(); it != p.sends.end();) {
    int done = 0;
    MPI_Test(&it->first, &done, MPI_STATUS_IGNORE);
    it = done ? p.sends.erase(it) : std::next(it);
  }
}

// Receives every message with `tag` that has arrived; returns (source, id, rest).
std::vector<std::tuple<int, int64_t, std::string>> receive_all(Probe& p, int tag) {
  std::vector<std::tuple<int, int64_t, std::string>> out;
  for (;;) {
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, tag, p.comm, &flag, &status);
    if (!flag) return out;
    int bytes = 0;
    MPI_Get_count(&status, MPI_CHAR, &bytes);
    std::string buffer(static_cast<size_t>(bytes), '\0');
    MPI_Recv(buffer.data(), bytes, MPI_CHAR, status.MPI_SOURCE, tag, p.comm, MPI_STATUS_IGNORE);
    const auto newline = buffer.find('\n');
    out.emplace_back(status.MPI_SOURCE, std::stoll(buffer.substr(0, newline)),
                     newline == std::string::npos ? "" : buffer.substr(newline + 1));
  }
}

// The deadlock a complete round shows, as text (empty: none). Every rank has a waiting
// collective on a thread of its own, and no collective has all its members waiting in it.
std::string deadlock_in(const std::map<int, Answer>& answers) {
  for (const auto& [rank, a] : answers)
    if (std::none_of(a.entries.begin(), a.entries.end(), [](auto& e) { return !e.background; }))
      return "";
  auto waits_in = [&](int rank, uint64_t key, uint64_t sequence) {
    auto it = answers.find(rank);
    return it != answers.end() &&
           std::any_of(it->second.entries.begin(), it->second.entries.end(), [&](auto& e) {
             return e.comm_key == key && e.sequence == sequence;
           });
  };
  std::string canonical;
  for (const auto& [rank, a] : answers) {
    canonical += fmt::format("{}:{}", rank, a.entered);
    for (const auto& e : a.entries) {
      if (std::all_of(e.members.begin(), e.members.end(),
                      [&](int m) { return waits_in(m, e.comm_key, e.sequence); }))
        return "";  // this one can complete: slow, not stuck
      canonical += fmt::format(" {}#{}", e.comm_key, e.sequence);
    }
    canonical += ";";
  }
  return canonical;
}

[[noreturn]] void report(const std::map<int, Answer>& answers) {
  std::string table;
  for (const auto& [rank, a] : answers)
    for (const auto& e : a.entries) table += fmt::format("\n  rank {}: {}", rank, e.description);
  abort_job(fmt::format("collectives wait on each other across communicators and none can "
                        "complete (NNX_CHECK_COLLECTIVES=1); each rank waits in:{}\nending the "
                        "job: make every rank call the same collectives in the same order",
                        table));
}

void tick_locked(Probe& p) {
  reap_sends(p);
  for (auto& [from, id, unused] : receive_all(p, kQuestionTag))
    send(p, from, kAnswerTag, fmt::format("{}\n{}", id, my_state(p)));
  for (auto& [from, id, text] : receive_all(p, kAnswerTag))
    if (id == p.round && p.round != 0) p.answers[from] = parse(text);

  const auto now = Clock::now();
  if (p.round != 0 && static_cast<int>(p.answers.size()) == p.size - 1) {
    p.answers[p.rank] = parse(my_state(p));
    const std::string deadlock = deadlock_in(p.answers);
    if (!deadlock.empty() && deadlock == p.previous_deadlock) report(p.answers);
    p.previous_deadlock = deadlock;
    p.round = 0;
    p.round_end = now;
  }
  if (p.round != 0 || p.waiting.empty() || now - p.round_end < kBetweenRounds) return;
  // Only a wait of this rank's own threads starts a round (a background thread's may be long).
  if (std::none_of(p.waiting.begin(), p.waiting.end(),
                   [&](auto& w) { return !w.background && now - w.since >= kAskAfter; }))
    return;
  p.round = (static_cast<int64_t>(p.rank) << 40) + ++p.rounds_asked;
  p.answers.clear();
  for (int r = 0; r < p.size; ++r)
    if (r != p.rank) send(p, r, kQuestionTag, fmt::format("{}\n", p.round));
}

}  // namespace

void start_stall_probe() {
  Probe& p = probe();
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  MPI_Comm_rank(MPI_COMM_WORLD, &p.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p.size);
  if (p.size == 1 || level != MPI_THREAD_MULTIPLE) return;
  MPI_Comm_dup(MPI_COMM_WORLD, &p.comm);
}

WaitingCollective::WaitingCollective(uint64_t comm_key, const std::vector<int>& members,
                                     std::string comm_name, const char* op, uint64_t sequence,
                                     const CallStack* stack) {
  Probe& p = probe();
  std::lock_guard lock(p.mutex);
  ++p.entered;
  p.waiting.push_back({comm_key, members, std::move(comm_name), op, sequence, stack,
                       current_call_site(), lazy_waits(), Clock::now()});
  entry_ = &p.waiting.back();
}

WaitingCollective::~WaitingCollective() {
  Probe& p = probe();
  std::lock_guard lock(p.mutex);
  for (auto it = p.waiting.begin(); it != p.waiting.end(); ++it)
    if (&*it == entry_) {
      p.waiting.erase(it);
      break;
    }
  if (p.waiting.empty()) {  // a round asked while waiting no longer means anything
    p.round = 0;
    p.previous_deadlock.clear();
  }
}

void stall_probe_tick() {
  Probe& p = probe();
  if (p.comm == MPI_COMM_NULL || !Communicator::checking()) return;
  std::unique_lock lock(p.mutex, std::try_to_lock);
  if (!lock.owns_lock()) return;
  const auto now = Clock::now();
  if (now - p.last_tick < kBetweenTicks) return;
  p.last_tick = now;
  tick_locked(p);
}

}  // namespace nnx::detail
