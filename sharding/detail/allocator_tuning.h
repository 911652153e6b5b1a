// Keeping freed memory for reuse. A training step frees and allocates the same large tensors
// every step; glibc's defaults hand blocks above 128 KiB back to the kernel and trim the heap, so
// each step pays page faults for them again (10-15% of a step on the benchmarks). nnx raises the
// thresholds once, when MPI starts: blocks up to 64 MiB come from the heap, and up to 256 MiB of
// free heap is kept. NNX_MALLOC_TUNING=0, or the user's own GLIBC_TUNABLES/MALLOC_* settings,
// leave glibc's defaults.
#pragma once

namespace nnx::detail {

void tune_allocator_once();

}  // namespace nnx::detail
