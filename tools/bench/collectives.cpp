// Collective throughput of nnx's Communicator against raw MPI calls on the same bytes, for
// sizes 4 KiB to 64 MiB. Run under mpirun -np 2 or 4. Prints one JSON line per (op, size).
//
// Allocation policy, stated per column:
//   mpi       MPI into buffers allocated once, before timing;
//   into      nnx's in-place or _into forms into the same kind of buffers (like with like);
//   returning nnx's forms that return a new tensor, taken from nnx's buffer cache.
// Each sample times a batch of back-to-back calls after a barrier (per-call time = batch time /
// calls); the three systems alternate batch by batch so drift touches all alike; medians.
#include <nnx/nnx.h>

#include <mpi.h>
#include <torch/torch.h>

#include <fmt/format.h>

#include "bench_util.h"

#include <algorithm>
#include <chrono>
#include <functional>

int main(int argc, char** argv) {
  auto world = nnx::Communicator::world();
  const int n = world.size();
  const int64_t max_bytes = argc > 1 ? std::stoll(argv[1]) : (64LL << 20);
  for (int64_t bytes = 4 << 10; bytes <= max_bytes; bytes *= 4) {
    const int64_t count = bytes / 4;  // float32 elements, a multiple of n for n in 1, 2, 4
    const int calls = std::clamp<int>(static_cast<int>((1 << 20) / bytes), 1, 100);
    const int samples = bytes <= (1 << 20) ? 30 : 10;
    auto x = torch::randn({count});
    auto y = torch::zeros({count});  // summed in place call after call: keep it finite
    auto part = torch::empty({count / n});
    auto gathered = torch::empty({count * n});
    const int c = static_cast<int>(count);
    struct Op {
      const char* name;
      std::function<void()> mpi, into, returning;
    };
    std::vector<Op> ops{
        {"all_reduce",
         [&] { MPI_Allreduce(MPI_IN_PLACE, y.data_ptr(), c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
         [&] { world.all_reduce_(y); }, nullptr},
        {"all_gather",
         [&] {
           MPI_Allgather(x.data_ptr(), c, MPI_FLOAT, gathered.data_ptr(), c, MPI_FLOAT,
                         MPI_COMM_WORLD);
         },
         [&] { world.all_gather_into(gathered, x); }, [&] { (void)world.all_gather(x, 0); }},
        {"reduce_scatter",
         [&] {
           MPI_Reduce_scatter_block(x.data_ptr(), part.data_ptr(), c / n, MPI_FLOAT, MPI_SUM,
                                    MPI_COMM_WORLD);
         },
         [&] { world.reduce_scatter_into(part, x); },
         [&] { (void)world.reduce_scatter(x, 0); }},
        {"all_to_all",
         [&] {
           MPI_Alltoall(x.data_ptr(), c / n, MPI_FLOAT, y.data_ptr(), c / n, MPI_FLOAT,
                        MPI_COMM_WORLD);
         },
         [&] { world.all_to_all_into(y, x); }, [&] { (void)world.all_to_all(x, 0, 0); }},
    };
    for (auto& op : ops) {
      std::vector<std::function<void()>*> systems{&op.mpi, &op.into};
      if (op.returning) systems.push_back(&op.returning);
      std::vector<std::vector<double>> times(systems.size());
      auto batch = [&](std::function<void()>& call) {
        MPI_Barrier(MPI_COMM_WORLD);
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) call();
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
               calls;
      };
      for (auto* s : systems) batch(*s);  // warm-up: caches, first-touch pages
      for (int k = 0; k < samples; ++k)
        for (size_t s = 0; s < systems.size(); ++s) times[s].push_back(batch(*systems[s]));
      const double mpi = nnx_bench::median(times[0]), into = nnx_bench::median(times[1]);
      if (world.rank() != 0) continue;
      std::string line = fmt::format(
          "{{\"bench\": \"collectives\", \"op\": \"{}\", \"ranks\": {}, \"bytes\": {}, "
          "\"calls_per_sample\": {}, \"mpi_us\": {:.2f}, \"into_us\": {:.2f}, \"into_ratio\": "
          "{:.3f}",
          op.name, n, bytes, calls, mpi * 1e6, into * 1e6, into / mpi);
      if (op.returning) {
        const double returning = nnx_bench::median(times[2]);
        line += fmt::format(", \"returning_us\": {:.2f}, \"returning_ratio\": {:.3f}",
                            returning * 1e6, returning / mpi);
      }
      fmt::print("{}}}\n", line);
    }
  }
  return 0;
}
