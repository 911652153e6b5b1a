#include <nnx/sharding/detail/process_memory.h>

#include <sys/uio.h>

#include <cerrno>

namespace nnx::detail {

namespace {

// process_vm_readv or process_vm_writev: the same arguments, local iovecs first.
using Transfer = ssize_t (*)(pid_t, const iovec*, unsigned long, const iovec*, unsigned long,
                             unsigned long);

// Moves `bytes` between `local` and `remote` in process `pid` by `transfer`. The kernel may move
// less than asked (a partial copy); the rest follows in further calls.
bool transfer_all(Transfer transfer, pid_t pid, char* local, char* remote, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    const iovec here{local + done, bytes - done};
    const iovec there{remote + done, bytes - done};
    const ssize_t n = transfer(pid, &here, 1, &there, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EFAULT;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

bool read_process_memory(pid_t pid, const void* remote, void* local, size_t bytes) {
  return transfer_all(process_vm_readv, pid, static_cast<char*>(local),
                      const_cast<char*>(static_cast<const char*>(remote)), bytes);
}

bool write_process_memory(pid_t pid, const void* local, void* remote, size_t bytes) {
  return transfer_all(process_vm_writev, pid, const_cast<char*>(static_cast<const char*>(local)),
                      static_cast<char*>(remote), bytes);
}

}  // namespace nnx::detail
