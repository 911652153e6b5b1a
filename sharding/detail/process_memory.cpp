#include <nnx/sharding/detail/process_memory.h>

#include <sys/uio.h>

#include <cerrno>

namespace nnx::detail {

bool read_process_memory(pid_t pid, const void* remote, void* local, size_t bytes) {
  // The kernel may copy less than asked (a partial read); the rest follows in further calls.
  size_t done = 0;
  while (done < bytes) {
    iovec to{static_cast<char*>(local) + done, bytes - done};
    iovec from{const_cast<char*>(static_cast<const char*>(remote)) + done, bytes - done};
    const ssize_t n = process_vm_readv(pid, &to, 1, &from, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EFAULT;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace nnx::detail
