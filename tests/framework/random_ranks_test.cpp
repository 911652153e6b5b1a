// Partitionable randomness across processes: each rank samples only its block of rows, and the
// gathered blocks equal the whole array sampled on one process.
#include "../catch_after_torch.h"
#include <mpi.h>

#include <nnx/nnx.h>

#include <torch/types.h>

TEST_CASE("row blocks sampled on each rank gather to the whole array", "[ranks2][ranks4][ranks8]") {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int64_t rows_per_rank = 3, cols = 7;
  nnx::Shape shape{rows_per_rank * size, cols};
  nnx::Box mine{{rank * rows_per_rank, 0}, {rows_per_rank, cols}};
  auto key = nnx::random::fold_in(nnx::random::key(42), 7);
  auto init = nnx::initializers::lecun_normal();
  auto check = [&](const at::Tensor& local, const at::Tensor& whole) {
    auto gathered = torch::empty(shape, torch::kFloat);
    MPI_Allgather(local.contiguous().data_ptr<float>(), rows_per_rank * cols, MPI_FLOAT,
                  gathered.data_ptr<float>(), rows_per_rank * cols, MPI_FLOAT, MPI_COMM_WORLD);
    CHECK(torch::equal(gathered, whole));
  };
  check(nnx::random::normal(key, shape, {.block = mine}), nnx::random::normal(key, shape));
  check(nnx::random::truncated_normal(key, -2, 2, shape, {.block = mine}),
        nnx::random::truncated_normal(key, -2, 2, shape));
  check(init.fn(key, shape, torch::kFloat, mine), init.full(key, shape));
}
