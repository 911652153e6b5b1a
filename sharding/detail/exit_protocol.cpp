// The goodbye protocol runs on a duplicate of the world communicator: each rank posts one receive
// for the first goodbye at start-up; at exit it sends goodbye to every other rank, waits in a
// barrier, collects the remaining goodbyes and finalizes.
#include <nnx/sharding/detail/exit_protocol.h>

#include <nnx/sharding/detail/collective_wait.h>

#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <vector>

namespace nnx::detail {
namespace {

constexpr int kGoodbyeTag = 77;
MPI_Comm goodbye_comm = MPI_COMM_NULL;
MPI_Request next_goodbye = MPI_REQUEST_NULL;  // re-posted after each goodbye
int next_goodbye_from = -1;
std::vector<int> departed;  // guarded by goodbye_mutex
std::mutex goodbye_mutex;   // MPI_Test on one request from one thread at a time
int rank = 0, size = 1;

void post_goodbye_receive() {
  MPI_Irecv(&next_goodbye_from, 1, MPI_INT, MPI_ANY_SOURCE, kGoodbyeTag, goodbye_comm,
            &next_goodbye);
}

double exit_timeout_seconds() {
  const char* env = std::getenv("NNX_EXIT_TIMEOUT");
  char* end = nullptr;
  const double value = env ? std::strtod(env, &end) : 0;
  return (env && *end == '\0' && value > 0) ? value : 3600.0;
}

void on_terminate() {
  std::string message = "std::terminate called without an active exception";
  if (auto error = std::current_exception()) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
      message = "an unknown exception escaped main";
    }
  }
  abort_job(message);
}

}  // namespace

[[noreturn]] void abort_job(const std::string& message, int status) {
  std::fprintf(stderr, "nnx: rank %d: %s\n", rank, message.c_str());
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status);
}

void start_exit_protocol() {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::set_terminate(on_terminate);
  if (size == 1) return;
  MPI_Comm_dup(MPI_COMM_WORLD, &goodbye_comm);
  post_goodbye_receive();
}

std::vector<int> departed_ranks() {
  if (goodbye_comm == MPI_COMM_NULL) return {};
  std::lock_guard lock(goodbye_mutex);
  while (next_goodbye != MPI_REQUEST_NULL && static_cast<int>(departed.size()) < size - 1) {
    int done = 0;
    MPI_Test(&next_goodbye, &done, MPI_STATUS_IGNORE);
    if (!done) break;
    departed.push_back(next_goodbye_from);
    if (static_cast<int>(departed.size()) < size - 1) post_goodbye_receive();
  }
  return departed;
}

void finish_exit_protocol() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // the program finalized MPI itself
  if (goodbye_comm != MPI_COMM_NULL) {
    std::vector<MPI_Request> sends(size, MPI_REQUEST_NULL);
    for (int r = 0; r < size; ++r)
      if (r != rank) MPI_Isend(&rank, 1, MPI_INT, r, kGoodbyeTag, goodbye_comm, &sends[r]);
    MPI_Request barrier;
    MPI_Ibarrier(goodbye_comm, &barrier);
    wait_for(&barrier, goodbye_comm, "the exit barrier", "world", /*watch_departures=*/false,
             exit_timeout_seconds());
    // Everyone has sent its goodbyes: receive the rest, so nothing is left in flight.
    {
      std::lock_guard lock(goodbye_mutex);
      while (static_cast<int>(departed.size()) < size - 1) {
        MPI_Wait(&next_goodbye, MPI_STATUS_IGNORE);
        departed.push_back(next_goodbye_from);
        if (static_cast<int>(departed.size()) < size - 1) post_goodbye_receive();
      }
    }
    MPI_Waitall(size, sends.data(), MPI_STATUSES_IGNORE);
    MPI_Comm_free(&goodbye_comm);
  }
  MPI_Finalize();
}

}  // namespace nnx::detail
