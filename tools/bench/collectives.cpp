// Collective throughput of nnx's Communicator against raw MPI calls on the same bytes, for
// sizes 4 KiB to 64 MiB. Run under mpirun -np 2 or 4. Prints one JSON line per (op, size).
// Arguments, both optional: the largest size in bytes, and a comma-separated list of the ops to
// time (all five by default).
//
// Allocation policy, stated per column:
//   mpi       MPI into buffers allocated once, before timing; run twice, each run into buffers
//             of its own, so mpi_again_ratio shows how far like differs from like;
//   into      nnx's in-place or _into forms into the same kind of buffers (like with like);
//   returning nnx's forms that return a new tensor, taken from nnx's buffer cache.
// Each sample times a batch of back-to-back calls after a barrier (per-call time = batch time /
// calls); the systems alternate batch by batch so drift touches all alike; medians.
#include <nnx/nnx.h>

#include <mpi.h>
#include <torch/torch.h>

#include <fmt/format.h>

#include "bench_util.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>

int main(int argc, char** argv) {
  auto world = nnx::Communicator::world();
  const int n = world.size();
  const int64_t max_bytes = argc > 1 ? std::stoll(argv[1]) : (64LL << 20);
  const std::string only = argc > 2 ? "," + std::string(argv[2]) + "," : "";
  for (int64_t bytes = 4 << 10; bytes <= max_bytes; bytes *= 4) {
    const int64_t count = bytes / 4;  // float32 elements, a multiple of n for n in 1, 2, 4
    const int calls = std::clamp<int>(static_cast<int>((1 << 20) / bytes), 1, 100);
    const int samples = bytes <= (16 << 20) ? 30 : 10;
    auto x = torch::randn({count});
    // Each system writes its own outputs: a buffer that the system before it has just written
    // would still be warm in the cache. y is summed in place call after call: zeros keep it finite.
    struct Outputs {
      at::Tensor y, part, gathered;
    };
    auto outputs = [&] {
      return Outputs{torch::zeros({count}), torch::empty({count / n}), torch::empty({count * n})};
    };
    Outputs mpi_out = outputs(), again_out = outputs(), nnx_out = outputs();
    const int c = static_cast<int>(count);
    struct Op {
      const char* name;
      std::function<void(Outputs&)> mpi;
      std::function<void()> into, returning;
    };
    std::vector<Op> ops{
        {"all_reduce",
         [&](Outputs& o) {
           MPI_Allreduce(MPI_IN_PLACE, o.y.data_ptr(), c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
         },
         [&] { world.all_reduce_(nnx_out.y); }, nullptr},
        // Above the direct limit nnx's max goes through an MPI op of its own that keeps NaNs.
        {"all_reduce_max",
         [&](Outputs& o) {
           MPI_Allreduce(MPI_IN_PLACE, o.y.data_ptr(), c, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
         },
         [&] { world.all_reduce_(nnx_out.y, nnx::ReduceOp::max); }, nullptr},
        {"all_gather",
         [&](Outputs& o) {
           MPI_Allgather(x.data_ptr(), c, MPI_FLOAT, o.gathered.data_ptr(), c, MPI_FLOAT,
                         MPI_COMM_WORLD);
         },
         [&] { world.all_gather_into(nnx_out.gathered, x); },
         [&] { (void)world.all_gather(x, 0); }},
        {"reduce_scatter",
         [&](Outputs& o) {
           MPI_Reduce_scatter_block(x.data_ptr(), o.part.data_ptr(), c / n, MPI_FLOAT, MPI_SUM,
                                    MPI_COMM_WORLD);
         },
         [&] { world.reduce_scatter_into(nnx_out.part, x); },
         [&] { (void)world.reduce_scatter(x, 0); }},
        {"all_to_all",
         [&](Outputs& o) {
           MPI_Alltoall(x.data_ptr(), c / n, MPI_FLOAT, o.y.data_ptr(), c / n, MPI_FLOAT,
                        MPI_COMM_WORLD);
         },
         [&] { world.all_to_all_into(nnx_out.y, x); }, [&] { (void)world.all_to_all(x, 0, 0); }},
    };
    for (auto& op : ops) {
      if (!only.empty() && only.find("," + std::string(op.name) + ",") == std::string::npos)
        continue;
      // MPI, then MPI again into its own outputs (the spread of like against like), then nnx.
      std::function<void()> mpi = [&] { op.mpi(mpi_out); }, again = [&] { op.mpi(again_out); };
      std::vector<std::function<void()>*> systems{&mpi, &again, &op.into};
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
      const double mpi_us = nnx_bench::median(times[0]) * 1e6;
      const double again_us = nnx_bench::median(times[1]) * 1e6;
      const double into_us = nnx_bench::median(times[2]) * 1e6;
      if (world.rank() != 0) continue;
      std::string line = fmt::format(
          "{{\"bench\": \"collectives\", \"op\": \"{}\", \"ranks\": {}, \"bytes\": {}, "
          "\"calls_per_sample\": {}, \"mpi_us\": {:.2f}, \"mpi_again_ratio\": {:.3f}, "
          "\"into_us\": {:.2f}, \"into_ratio\": {:.3f}",
          op.name, n, bytes, calls, mpi_us, again_us / mpi_us, into_us, into_us / mpi_us);
      if (op.returning) {
        const double returning = nnx_bench::median(times[3]) * 1e6;
        line += fmt::format(", \"returning_us\": {:.2f}, \"returning_ratio\": {:.3f}",
                            returning, returning / mpi_us);
      }
      fmt::print("{}}}\n", line);
    }
  }
  return 0;
}
