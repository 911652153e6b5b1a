// Buffers for collectives, reused. A collective returns a new tensor; allocating it fresh
// would make every large call pay the kernel's page faults (a 64 MiB all_gather twice over). So
// freed outputs return to a cache keyed by size, and the next call of that size takes one back.
// The cache keeps at most 512 MiB; beyond that, freed buffers go back to the system.
#pragma once

#include <ATen/core/Tensor.h>

namespace nnx {

// An uninitialized contiguous tensor on the options' device for a collective to fill (outputs,
// gradient buckets); on the CPU its memory comes from (and returns to) the cache.
at::Tensor comm_buffer(at::IntArrayRef sizes, const at::TensorOptions& options);

}  // namespace nnx
