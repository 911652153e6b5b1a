// Reading parts of a file by offset, with errors that name the file.
#pragma once

#include <cstdint>
#include <string>

namespace nnx::data::detail {

// A read-only descriptor (closed by the caller) and the file's size in bytes.
int open_for_reading(const std::string& path, int64_t* size_bytes);
// Closes the descriptor `fd` refers to at scope exit unless released: for constructors that
// may throw after opening (their destructor would not run).
class CloseOnError {
 public:
  explicit CloseOnError(int& fd) : fd_(&fd) {}
  ~CloseOnError();
  CloseOnError(const CloseOnError&) = delete;
  CloseOnError& operator=(const CloseOnError&) = delete;
  void release() { fd_ = nullptr; }

 private:
  int* fd_;
};

// Exactly `bytes` bytes at `offset`, or an error naming the file and the offset.
void read_at(int fd, void* out, int64_t bytes, int64_t offset, const std::string& path);

}  // namespace nnx::data::detail
