// float32 matmul throughput through nnx::matmul against at::matmul on the same tensors, with the
// intra-op threads nnx chooses (cores / local ranks unless NNX_NUM_THREADS says otherwise).
// Prints one JSON line per size; with --min-gflops G it exits 1 if nnx::matmul at 1024^3 is below G.
#include <nnx/nnx.h>

#include <torch/torch.h>

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <cstring>
#include <string>

#include "bench_util.h"

int main(int argc, char** argv) {
  double min_gflops = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--min-gflops") == 0 && i + 1 < argc) {
      min_gflops = std::stod(argv[++i]);
    } else {
      fmt::print(stderr, "usage: bench_matmul [--min-gflops G]\n");
      return 2;
    }
  }
  torch::NoGradGuard no_grad;
  const int rank = nnx::world_rank();  // starts MPI, which applies the thread default
  double gflops_1024 = 0;
  for (int64_t n : {256, 1024, 2048}) {
    auto a = torch::randn({n, n}), b = torch::randn({n, n});
    nnx::Array pa(a), pb(b);
    const int reps = n <= 256 ? 200 : (n <= 1024 ? 30 : 8);
    double t_torch = nnx_bench::median_seconds([&] { return at::matmul(a, b); }, reps);
    double t_nnx = nnx_bench::median_seconds([&] { return nnx::matmul(pa, pb); }, reps);
    double flops = 2.0 * n * n * n;
    if (n == 1024) gflops_1024 = flops / t_nnx / 1e9;
    if (rank == 0)
      fmt::print("{{\"bench\": \"matmul\", \"dtype\": \"float32\", \"n\": {}, \"threads\": {}, "
                 "\"torch_gflops\": {:.1f}, \"nnx_gflops\": {:.1f}, \"ratio\": {:.3f}}}\n",
                 n, at::get_num_threads(), flops / t_torch / 1e9, flops / t_nnx / 1e9,
                 t_nnx / t_torch);
  }
  if (gflops_1024 < min_gflops) {
    fmt::print(stderr, "nnx::matmul float32 1024^3: {:.1f} GFLOP/s, below the required {:.1f}\n",
               gflops_1024, min_gflops);
    return 1;
  }
  return 0;
}
