// A program that ends badly on purpose, one way per argument, for exit_test.sh: nnx starts MPI
// itself here (as in users' programs), so its exit protocol is the one under test.
#include <nnx/nnx.h>
#include <nnx/sharding/detail/direct_collectives.h>

#include <torch/types.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const int rank = nnx::world_rank();
  auto mesh = nnx::make_mesh({nnx::world_size()}, {"data"});
  auto x = nnx::device_put(torch::ones({4 * nnx::world_size()}), {mesh, nnx::P("data")});
  nnx::gather(x);  // every mode starts with one collective that all ranks reach
  if (mode == "uncaught") {  // rank 1 throws out of main; the others wait in a collective
    if (rank == 1) NNX_FAIL("the data file is corrupt (rank 1 alone)");
    nnx::gather(x);
  } else if (mode == "early_return") {  // rank 1 returns while the others enter a collective
    if (rank == 1) return 0;
    nnx::gather(x);
  } else if (mode == "skipped") {  // rank 1 never joins the collective, nor leaves for a while
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(40));
      return 0;
    }
    nnx::gather(x);
  } else if (mode == "second_leaver") {  // 3 ranks: rank 2 finishes, then rank 1 leaves early
    auto pair = nnx::Communicator::world().split(rank < 2 ? 0 : 1, rank, "pair");
    if (rank == 2) return 0;                 // not a member of rank 0's pair: fine
    std::this_thread::sleep_for(std::chrono::seconds(1));
    if (rank == 1) return 0;                 // a member: rank 0 must notice this goodbye too
    auto t = torch::ones({4});
    pair.all_reduce_(t);
  } else if (mode == "cross_wait") {  // ranks wait over different communicators: a deadlock
    auto side = nnx::Communicator::world().duplicate("side");
    if (rank == 0) nnx::gather(x);
    else side.barrier();
  } else if (mode == "slow_chain") {  // 3 ranks: 0 waits for 1, which waits for 2, which computes
    auto pair = nnx::Communicator::world().split(rank == 0 ? 0 : 1, rank, "pair12");
    auto t = torch::ones({4});
    if (rank == 2) std::this_thread::sleep_for(std::chrono::seconds(4));
    if (rank != 0) pair.all_reduce_(t);
    nnx::gather(x);
  } else if (mode == "read_then_left") {  // 3 or more ranks: ranks 1 to n - 2 read rank 0's
    // input and leave, while the last rank starts reading it 3 s late: rank 0 waits for the
    // last, not for those that left
    auto world = nnx::Communicator::world();
    const int last = world.size() - 1;
    auto b = rank == 0 ? torch::full({50000}, 7.0f) : torch::zeros({50000});  // read directly
    if (rank == last) nnx::detail::pause_direct_reads(3000);
    const int64_t before = nnx::detail::direct_collectives_run();
    world.broadcast_(b, 0);
    if (rank != 0 && !torch::equal(b, torch::full({50000}, 7.0f))) {
      std::fprintf(stderr, "read_then_left: rank %d received other values than rank 0's\n", rank);
      return 3;
    }
    if (rank != 0 && rank != last) return 0;
    if (rank == 0)
      std::printf("finished read_then_left %s\n",
                  nnx::detail::direct_collectives_run() > before ? "after direct reads"
                                                                 : "through MPI");
    return 0;
  } else if (mode == "slow_finish") {  // rank 0 works alone after the last collective: fine
    if (rank == 0) std::this_thread::sleep_for(std::chrono::seconds(4));
  } else if (mode != "normal") {
    std::fprintf(stderr, "unknown mode '%s'\n", mode.c_str());
    return 2;
  }
  if (rank == 0) std::printf("finished %s\n", mode.c_str());
  return 0;
}
