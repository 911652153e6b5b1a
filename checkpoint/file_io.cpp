// POSIX implementation of the checkpoint file helpers: every call loops on EINTR and partial
// transfers, and every failure is an nnx::Error naming the path and the system's reason.
#include <nnx/checkpoint/crc32c.h>
#include <nnx/checkpoint/file_io.h>
#include <nnx/core/error.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>
#include <utility>
#include <vector>

namespace nnx::checkpoint {
namespace {

constexpr uint64_t kMaxTransfer = 1ull << 30;  // per read/write call

std::string reason(int err) { return std::error_code(err, std::generic_category()).message(); }

std::string parent_directory(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

void close_quietly(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

namespace detail {
FileHandle::FileHandle(FileHandle&& other) noexcept
    : path(std::move(other.path)), fd(std::exchange(other.fd, -1)), size(other.size) {}
FileHandle& FileHandle::operator=(FileHandle&& other) noexcept {
  if (this != &other) {
    close_quietly(fd);
    path = std::move(other.path);
    fd = std::exchange(other.fd, -1);
    size = other.size;
  }
  return *this;
}
FileHandle::~FileHandle() { close_quietly(fd); }
}  // namespace detail

namespace detail {

void check_file_range(uint64_t offset, uint64_t n, uint64_t file_size, std::string_view path,
                      const char* who) {
  uint64_t end = 0;
  if (__builtin_add_overflow(offset, n, &end))
    nnx::detail::throw_error(
        who, fmt::format("'{}' is truncated: needs {} bytes from byte {} but has {} bytes", path, n,
                         offset, file_size));
  if (end > file_size)
    nnx::detail::throw_error(
        who, fmt::format("'{}' is truncated: needs bytes [{}, {}) but has {} bytes", path, offset,
                         end, file_size));
}

}  // namespace detail

void fsync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  NNX_CHECK(fd >= 0, "could not open directory '{}' to fsync it: {}", dir, reason(errno));
  int rc;
  do rc = ::fsync(fd);
  while (rc != 0 && errno == EINTR);
  int err = errno;
  ::close(fd);
  // Some file systems cannot fsync a directory (EINVAL); their renames are as durable as it gets.
  NNX_CHECK(rc == 0 || err == EINVAL, "could not fsync directory '{}': {}", dir, reason(err));
}

void write_file_atomically(const std::string& path, std::string_view contents) {
  const std::string temp = fmt::format("{}.tmp.{}", path, ::getpid());
  try {
    OutputFile out(temp);
    out.write(contents.data(), contents.size());
    out.sync_and_close();
    NNX_CHECK(::rename(temp.c_str(), path.c_str()) == 0, "could not rename '{}' to '{}': {}", temp,
              path, reason(errno));
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
  fsync_directory(parent_directory(path));
}

OutputFile::OutputFile(std::string path) {
  h_.path = std::move(path);
  do h_.fd = ::open(h_.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  while (h_.fd < 0 && errno == EINTR);
  NNX_CHECK(h_.fd >= 0, "could not create '{}': {}", h_.path, reason(errno));
}




void OutputFile::write(const void* data, size_t size) {
  NNX_CHECK(h_.fd >= 0, "'{}' is already closed", h_.path);
  auto p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(h_.fd, p, std::min<uint64_t>(size, kMaxTransfer));
    if (n < 0 && errno == EINTR) continue;
    NNX_CHECK(n > 0, "could not write {} bytes to '{}' at byte {}: {}", size, h_.path, h_.size,
              n < 0 ? reason(errno) : "nothing was written");
    p += n;
    size -= static_cast<size_t>(n);
    h_.size += static_cast<uint64_t>(n);
  }
}

void OutputFile::sync_and_close() {
  NNX_CHECK(h_.fd >= 0, "'{}' is already closed", h_.path);
  int rc;
  do rc = ::fsync(h_.fd);
  while (rc != 0 && errno == EINTR);
  int err = errno;
  if (rc != 0) close_quietly(h_.fd);
  NNX_CHECK(rc == 0, "could not fsync '{}': {}", h_.path, reason(err));
  rc = ::close(std::exchange(h_.fd, -1));
  NNX_CHECK(rc == 0, "could not close '{}': {}", h_.path, reason(errno));
}

InputFile::InputFile(std::string path) {
  h_.path = std::move(path);
  do h_.fd = ::open(h_.path.c_str(), O_RDONLY | O_CLOEXEC);
  while (h_.fd < 0 && errno == EINTR);
  NNX_CHECK(h_.fd >= 0, "could not open '{}' for reading: {}", h_.path, reason(errno));
  struct stat st {};
  if (::fstat(h_.fd, &st) != 0) {
    int err = errno;
    close_quietly(h_.fd);
    NNX_FAIL("could not stat '{}': {}", h_.path, reason(err));
  }
  if (!S_ISREG(st.st_mode)) {
    close_quietly(h_.fd);
    NNX_FAIL("'{}' is not a regular file", h_.path);
  }
  h_.size = static_cast<uint64_t>(st.st_size);
}




void InputFile::read_at(uint64_t offset, void* dst, uint64_t n) const {
  detail::check_file_range(offset, n, h_.size, h_.path, __func__);
  NNX_CHECK(h_.fd >= 0, "'{}' was moved from", h_.path);
  auto p = static_cast<char*>(dst);
  for (uint64_t done = 0; done < n;) {
    ssize_t got =
        ::pread(h_.fd, p + done, std::min(n - done, kMaxTransfer), static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    NNX_CHECK(got >= 0, "could not read bytes [{}, {}) of '{}': {}", offset, offset + n, h_.path,
              reason(errno));
    NNX_CHECK(got > 0,
              "'{}' ended at byte {} while reading bytes [{}, {}): it shrank after being opened",
              h_.path, offset + done, offset, offset + n);
    done += static_cast<uint64_t>(got);
  }
}

std::string InputFile::read_string(uint64_t offset, uint64_t n) const {
  detail::check_file_range(offset, n, h_.size, h_.path, __func__);
  std::string s(n, '\0');
  read_at(offset, s.data(), n);
  return s;
}

void check_plain_file_name(std::string_view name, std::string_view what) {
  bool ok = !name.empty() && name.size() <= 255 && name.front() != '.';
  for (char c : name)
    ok = ok && ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '_' || c == '-');
  if (ok) return;
  std::string shown = name.size() <= 255 ? fmt::format("'{}'", name)
                                         : fmt::format("a name of {} characters", name.size());
  NNX_FAIL("{}: {} is not a plain file name: checkpoint file names must stay inside the checkpoint "
           "directory, so use 1 to 255 of the characters A-Z a-z 0-9 . _ - and do not start "
           "with '.'", what, shown);
}

uint32_t crc32c_of_range(const InputFile& file, uint64_t offset, uint64_t n) {
  constexpr uint64_t kPieceBytes = 16 << 20;
  std::vector<char> piece(std::min(n, kPieceBytes));
  uint32_t crc = 0;
  for (uint64_t done = 0; done < n;) {
    const uint64_t k = std::min<uint64_t>(piece.size(), n - done);
    file.read_at(offset + done, piece.data(), k);
    crc = crc32c(piece.data(), k, crc);
    done += k;
  }
  return crc;
}

}  // namespace nnx::checkpoint
