// Intra-op threads: ranks that share a machine split its cores instead of each taking them all.
#pragma once

namespace nnx {

// Sets LibTorch's intra-op threads for this process; nnx then leaves the choice alone.
void set_num_threads(int threads);
// The default nnx applies when MPI starts: NNX_NUM_THREADS, else OMP_NUM_THREADS, else the cores
// this process may run on divided by the ranks on this machine, at least 1.
int default_num_threads();

namespace detail {
// Applies default_num_threads() unless set_num_threads was called; once per process.
void apply_default_threads();
// Whether more ranks run on this machine than it has cores (waiting ranks should then sleep).
bool ranks_outnumber_cores();
}  // namespace detail

}  // namespace nnx
