// Reading another process's memory on this machine (Linux cross-memory attach): one copy from
// its pages into ours, the way MPI's shared-memory transport moves large messages.
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace nnx::detail {

// Copies `bytes` at `remote` in process `pid` into `local`. False, with errno set, where the
// kernel refuses (no permission, no such process or address).
bool read_process_memory(pid_t pid, const void* remote, void* local, size_t bytes);

}  // namespace nnx::detail
