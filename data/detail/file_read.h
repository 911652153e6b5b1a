// Reading parts of a file by offset, with errors that name the file.
#pragma once

#include <cstdint>
#include <string>

namespace nnx::data::detail {

// A read-only descriptor (closed by the caller) and the file's size in bytes.
int open_for_reading(const std::string& path, int64_t* size_bytes);
// Exactly `bytes` bytes at `offset`, or an error naming the file and the offset.
void read_at(int fd, void* out, int64_t bytes, int64_t offset, const std::string& path);

}  // namespace nnx::data::detail
