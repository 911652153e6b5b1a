// Collective throughput of nnx's Communicator against raw MPI calls on the same bytes, for
// sizes 4 KiB to 64 MiB. Run under mpirun -np 2 or 4. Prints one JSON line per (op, size):
// medians over repetitions and the ratio nnx / MPI (1.0 = no overhead).
#include <nnx/nnx.h>

#include <mpi.h>
#include <torch/torch.h>

#include <fmt/format.h>

#include "bench_util.h"

int main(int argc, char** argv) {
  auto world = nnx::Communicator::world();
  const int n = world.size();
  const int64_t max_bytes = argc > 1 ? std::stoll(argv[1]) : (64LL << 20);
  for (int64_t bytes = 4 << 10; bytes <= max_bytes; bytes *= 4) {
    const int64_t count = bytes / 4;  // float32 elements, a multiple of n for n in 1, 2, 4
    const int reps = bytes <= (1 << 20) ? 50 : 10;
    auto x = torch::randn({count});
    auto y = torch::empty({count});
    auto gathered = torch::empty({count * n});
    const int c = static_cast<int>(count);
    auto sync = [&] { MPI_Barrier(MPI_COMM_WORLD); };
    struct Op {
      const char* name;
      std::function<void()> nnx_call, mpi_call;
    };
    std::vector<Op> ops{
        {"all_reduce", [&] { y.copy_(x); world.all_reduce_(y); },
         [&] {
           y.copy_(x);
           MPI_Allreduce(MPI_IN_PLACE, y.data_ptr(), c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
         }},
        {"all_gather", [&] { (void)world.all_gather(x, 0); },
         [&] {
           MPI_Allgather(x.data_ptr(), c, MPI_FLOAT, gathered.data_ptr(), c, MPI_FLOAT,
                         MPI_COMM_WORLD);
         }},
        {"reduce_scatter", [&] { (void)world.reduce_scatter(x, 0); },
         [&] {
           MPI_Reduce_scatter_block(x.data_ptr(), y.data_ptr(), c / n, MPI_FLOAT, MPI_SUM,
                                    MPI_COMM_WORLD);
         }},
        {"all_to_all", [&] { (void)world.all_to_all(x, 0, 0); },
         [&] {
           MPI_Alltoall(x.data_ptr(), c / n, MPI_FLOAT, y.data_ptr(), c / n, MPI_FLOAT,
                        MPI_COMM_WORLD);
         }},
    };
    for (auto& op : ops) {
      double t_nnx = nnx_bench::median_seconds([&] { sync(); op.nnx_call(); }, reps);
      double t_mpi = nnx_bench::median_seconds([&] { sync(); op.mpi_call(); }, reps);
      if (world.rank() == 0)
        fmt::print(
            "{{\"bench\": \"collectives\", \"op\": \"{}\", \"ranks\": {}, \"bytes\": {}, "
            "\"nnx_ms\": {:.4f}, \"mpi_ms\": {:.4f}, \"ratio\": {:.3f}, \"nnx_GBps\": {:.3f}}}\n",
            op.name, n, bytes, t_nnx * 1e3, t_mpi * 1e3, t_nnx / t_mpi, bytes / t_nnx / 1e9);
    }
  }
  return 0;
}
