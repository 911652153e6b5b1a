// Collective throughput of nnx's Communicator against raw MPI calls on the same bytes, for
// sizes 4 KiB to 64 MiB. Run under mpirun -np 2 or 4. Prints one JSON line per (op, size).
// Arguments, all optional: the largest size in bytes, a comma-separated list of the ops to time
// (`all`, the default, times all five), the smallest size (4 KiB by default), the fewest calls
// per batch (8 by default), and `fresh` to have each member write its input before every call
// of every system, as a train step's gradients are written just before they are sent (by
// default the input stays as first written; write_us is one such write alone).
//
// Allocation policy, stated per column:
//   mpi       MPI into buffers allocated once, before timing; run twice, each run into buffers
//             of its own, so mpi_again_ratio shows how far like differs from like;
//   into      nnx's in-place or _into forms into the same kind of buffers (like with like);
//   returning nnx's forms that return a new tensor, taken from nnx's buffer cache.
// Each sample times a batch of back-to-back calls (1 MiB's worth, between the fewest and 100)
// after a barrier (per-call time = batch time / calls), as a training step makes them; the
// systems alternate batch by batch so drift touches all alike; medians. Each sample also times
// one call of MPI and one of the into form alone after a barrier (first_call_ratio): the latency
// of a call whose members arrive unevenly, which a batch spreads over its calls. A second lone
// MPI call into buffers of its own gives the spread of like against like there
// (first_call_again_ratio). The three lone calls take turns at each place in a sample. Those two
// ratios time rank 0; first_call_all_ratio and first_call_all_again_ratio time the slowest
// member of each lone call instead (when every member has its result); first_call_members gives
// each member's own ratio, first_call_members_us each member's medians in microseconds (MPI,
// MPI again, nnx), and first_call_mean_ratio (and _again_) the members' medians summed,
// nnx's over MPI's. Rank 0 leaves MPI's barrier first, so its lone call waits the longest for
// the others.
#include <nnx/nnx.h>

#include <mpi.h>
#include <torch/torch.h>

#include <fmt/format.h>

#include "bench_util.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>

int main(int argc, char** argv) {
  auto world = nnx::Communicator::world();
  const int n = world.size();
  const int64_t max_bytes = argc > 1 ? std::stoll(argv[1]) : (64LL << 20);
  const std::string wanted = argc > 2 ? argv[2] : "all";
  const std::string only = wanted == "all" ? "" : "," + wanted + ",";
  const int64_t min_bytes = argc > 3 ? std::stoll(argv[3]) : (4 << 10);
  const int min_calls = argc > 4 ? std::max(1, std::stoi(argv[4])) : 8;
  const bool fresh = argc > 5 && std::string(argv[5]) == "fresh";
  for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const int64_t count = bytes / 4;  // float32 elements, a multiple of n for n in 1, 2, 4
    const int calls =
        std::max(min_calls, std::clamp<int>(static_cast<int>((1 << 20) / bytes), 1, 100));
    const int samples = bytes <= (16 << 20) ? 30 : 12;  // multiples of 3: see the lone calls
    auto x = torch::randn({count});
    // A fresh input: written by this member just before the call, so its lines are in this
    // core's cache, modified, as a just-computed gradient's are. (All-reduces sum y in place,
    // fresh either way: for them the write only adds its time to every system alike.)
    auto write_input = [&](int i) { std::memset(x.data_ptr(), i & 1, x.nbytes()); };
    const double write_us =
        fresh ? nnx_bench::median_seconds([&, i = 0]() mutable { write_input(i++); }, 100, 0) * 1e6
              : 0;
    // Each system writes its own outputs: a buffer that the system before it has just written
    // would still be warm in the cache. y is summed in place call after call: zeros keep it finite.
    struct Outputs {
      at::Tensor y, part, gathered;
    };
    auto outputs = [&] {
      return Outputs{torch::zeros({count}), torch::empty({count / n}), torch::empty({count * n})};
    };
    Outputs mpi_out = outputs(), again_out = outputs(), nnx_out = outputs();
    Outputs mpi_first_out = outputs(), again_first_out = outputs(),  // for the single calls
        nnx_first_out = outputs();
    const int c = static_cast<int>(count);
    struct Op {
      const char* name;
      std::function<void(Outputs&)> mpi, into;
      std::function<void()> returning;
    };
    std::vector<Op> ops{
        {"all_reduce",
         [&](Outputs& o) {
           MPI_Allreduce(MPI_IN_PLACE, o.y.data_ptr(), c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
         },
         [&](Outputs& o) { world.all_reduce_(o.y); }, nullptr},
        // Above the direct limit nnx's max goes through an MPI op of its own that keeps NaNs.
        {"all_reduce_max",
         [&](Outputs& o) {
           MPI_Allreduce(MPI_IN_PLACE, o.y.data_ptr(), c, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
         },
         [&](Outputs& o) { world.all_reduce_(o.y, nnx::ReduceOp::max); }, nullptr},
        {"all_gather",
         [&](Outputs& o) {
           MPI_Allgather(x.data_ptr(), c, MPI_FLOAT, o.gathered.data_ptr(), c, MPI_FLOAT,
                         MPI_COMM_WORLD);
         },
         [&](Outputs& o) { world.all_gather_into(o.gathered, x); },
         [&] { (void)world.all_gather(x, 0); }},
        {"reduce_scatter",
         [&](Outputs& o) {
           MPI_Reduce_scatter_block(x.data_ptr(), o.part.data_ptr(), c / n, MPI_FLOAT, MPI_SUM,
                                    MPI_COMM_WORLD);
         },
         [&](Outputs& o) { world.reduce_scatter_into(o.part, x); },
         [&] { (void)world.reduce_scatter(x, 0); }},
        {"all_to_all",
         [&](Outputs& o) {
           MPI_Alltoall(x.data_ptr(), c / n, MPI_FLOAT, o.y.data_ptr(), c / n, MPI_FLOAT,
                        MPI_COMM_WORLD);
         },
         [&](Outputs& o) { world.all_to_all_into(o.y, x); },
         [&] { (void)world.all_to_all(x, 0, 0); }},
    };
    for (auto& op : ops) {
      if (!only.empty() && only.find(fmt::format(",{},", op.name)) == std::string::npos)
        continue;
      // MPI, then MPI again into its own outputs (the spread of like against like), then nnx.
      std::function<void()> mpi = [&] { op.mpi(mpi_out); }, again = [&] { op.mpi(again_out); },
                            into = [&] { op.into(nnx_out); };
      // The single calls write buffers of their own: one a batch writes next would be warm.
      std::function<void()> mpi_first = [&] { op.mpi(mpi_first_out); },
                            again_first = [&] { op.mpi(again_first_out); },
                            into_first = [&] { op.into(nnx_first_out); };
      std::vector<std::function<void()>*> systems{&mpi, &again, &into};
      if (op.returning) systems.push_back(&op.returning);
      std::vector<std::vector<double>> times(systems.size());
      auto batch = [&](std::function<void()>& call, int count) {
        MPI_Barrier(MPI_COMM_WORLD);
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < count; ++i) {
          if (fresh) write_input(i);
          call();
        }
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
               count;
      };
      for (auto* s : systems) batch(*s, calls);  // warm-up: caches, first-touch pages
      batch(mpi_first, 1);
      batch(again_first, 1);
      batch(into_first, 1);
      std::vector<double> mpi_first_times, again_first_times, into_first_times;
      std::vector<double> mpi_all_times, again_all_times, into_all_times;  // slowest member's
      for (int k = 0; k < samples; ++k) {
        for (size_t s = 0; s < systems.size(); ++s)
          times[s].push_back(batch(*systems[s], calls));
        // The lone calls take turns at going first, second and third: a fixed order would
        // give each place's own latency to one system.
        for (int turn = 0; turn < 3; ++turn) {
          switch ((k + turn) % 3) {
            case 0: mpi_first_times.push_back(batch(mpi_first, 1)); break;
            case 1: again_first_times.push_back(batch(again_first, 1)); break;
            default: into_first_times.push_back(batch(into_first, 1));
          }
        }
        std::array<double, 3> lone{mpi_first_times.back(), again_first_times.back(),
                                   into_first_times.back()};
        MPI_Allreduce(MPI_IN_PLACE, lone.data(), 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        mpi_all_times.push_back(lone[0]);
        again_all_times.push_back(lone[1]);
        into_all_times.push_back(lone[2]);
      }
      const double mpi_us = nnx_bench::median(times[0]) * 1e6;
      const double again_us = nnx_bench::median(times[1]) * 1e6;
      const double into_us = nnx_bench::median(times[2]) * 1e6;
      const double mpi_first_s = nnx_bench::median(mpi_first_times);
      const double first_ratio = nnx_bench::median(into_first_times) / mpi_first_s;
      const double first_again_ratio = nnx_bench::median(again_first_times) / mpi_first_s;
      const double mpi_all_s = nnx_bench::median(mpi_all_times);
      const double all_ratio = nnx_bench::median(into_all_times) / mpi_all_s;
      const double all_again_ratio = nnx_bench::median(again_all_times) / mpi_all_s;
      // Each member's lone-call medians (MPI, MPI again, nnx), gathered on rank 0.
      const std::array<double, 3> own{mpi_first_s, nnx_bench::median(again_first_times),
                                      nnx_bench::median(into_first_times)};
      std::vector<double> members(3 * static_cast<size_t>(n));
      MPI_Gather(own.data(), 3, MPI_DOUBLE, members.data(), 3, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      if (world.rank() != 0) continue;
      std::array<double, 3> summed{};
      std::string member_ratios, member_us;
      for (int m = 0; m < n; ++m) {
        for (int s = 0; s < 3; ++s) summed[s] += members[3 * m + s];
        member_ratios +=
            fmt::format("{}{:.3f}", m == 0 ? "" : ", ", members[3 * m + 2] / members[3 * m]);
        member_us += fmt::format("{}[{:.1f}, {:.1f}, {:.1f}]", m == 0 ? "" : ", ",
                                 members[3 * m] * 1e6, members[3 * m + 1] * 1e6,
                                 members[3 * m + 2] * 1e6);
      }
      std::string line = fmt::format(
          "{{\"bench\": \"collectives\", \"op\": \"{}\", \"ranks\": {}, \"bytes\": {}, "
          "\"inputs\": \"{}\", \"calls_per_sample\": {}, \"mpi_us\": {:.2f}, "
          "\"mpi_again_ratio\": {:.3f}, \"into_us\": {:.2f}, \"into_ratio\": {:.3f}",
          op.name, n, bytes, fresh ? "fresh" : "kept", calls, mpi_us, again_us / mpi_us, into_us,
          into_us / mpi_us);
      if (fresh) line += fmt::format(", \"write_us\": {:.2f}", write_us);
      if (op.returning) {
        const double returning = nnx_bench::median(times[3]) * 1e6;
        line += fmt::format(", \"returning_us\": {:.2f}, \"returning_ratio\": {:.3f}",
                            returning, returning / mpi_us);
      }
      line += fmt::format(", \"first_call_ratio\": {:.3f}, \"first_call_again_ratio\": {:.3f}",
                          first_ratio, first_again_ratio);
      line += fmt::format(
          ", \"first_call_all_ratio\": {:.3f}, \"first_call_all_again_ratio\": {:.3f}",
          all_ratio, all_again_ratio);
      line += fmt::format(
          ", \"first_call_members\": [{}], \"first_call_members_us\": [{}], "
          "\"first_call_mean_ratio\": {:.3f}, \"first_call_mean_again_ratio\": {:.3f}",
          member_ratios, member_us, summed[2] / summed[0], summed[1] / summed[0]);
      fmt::print("{}}}\n", line);
    }
  }
  return 0;
}
