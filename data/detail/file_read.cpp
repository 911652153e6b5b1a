// pread until done, retrying interrupted calls.
#include <nnx/data/detail/file_read.h>

#include <nnx/core/error.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace nnx::data::detail {

int open_for_reading(const std::string& path, int64_t* size_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  NNX_CHECK(fd >= 0, "cannot open {}: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    NNX_FAIL("{} is not a regular file", path);
  }
  *size_bytes = st.st_size;
  return fd;
}

CloseOnError::~CloseOnError() {
  if (fd_ != nullptr && *fd_ >= 0) {
    ::close(*fd_);
    *fd_ = -1;
  }
}

void read_at(int fd, void* out, int64_t bytes, int64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(out);
  while (bytes > 0) {
    ssize_t n = ::pread(fd, p, static_cast<size_t>(bytes), offset);
    if (n < 0 && errno == EINTR) continue;
    NNX_CHECK(n > 0, "{}: reading {} bytes at byte {} failed: {}", path, bytes, offset,
              n == 0 ? "the file ends there (it shrank while open?)" : std::strerror(errno));
    p += n, offset += n, bytes -= n;
  }
}

}  // namespace nnx::data::detail
