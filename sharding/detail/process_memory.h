// Reading and writing another process's memory on this machine (Linux cross-memory attach): one
// copy between its pages and ours, the way MPI's shared-memory transport moves large messages.
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace nnx::detail {

// Copies `bytes` at `remote` in process `pid` into `local`. False, with errno set, where the
// kernel refuses (no permission, no such process or address).
bool read_process_memory(pid_t pid, const void* remote, void* local, size_t bytes);
// Copies `bytes` at `local` to `remote` in process `pid`; false, with errno set, as above.
bool write_process_memory(pid_t pid, const void* local, void* remote, size_t bytes);

}  // namespace nnx::detail
