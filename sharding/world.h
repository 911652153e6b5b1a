// The MPI world: initialized on first use (a plain run is a world of one, no mpirun needed) and
// finalized at exit when nnx initialized it.
#pragma once

namespace nnx {

int world_rank();
int world_size();

namespace detail {
// Initializes MPI (thread-multiple) unless the program already did; finalizes at exit.
void ensure_mpi();
}  // namespace detail

}  // namespace nnx
