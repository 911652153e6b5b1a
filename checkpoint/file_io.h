// POSIX file access for checkpoints: atomic whole-file writes, a sequential OutputFile, an
// InputFile with bounds-checked positional reads, and the rule for file names in a checkpoint.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace nnx::checkpoint {

// Writes contents to `<path>.tmp.<pid>` in the same directory, fsyncs it, renames it over path
// and fsyncs the directory: readers see the old file or the whole new one, never a part.
void write_file_atomically(const std::string& path, std::string_view contents);

// fsync on a directory, making renames and new entries in it durable.
void fsync_directory(const std::string& dir);

namespace detail {
// An open file descriptor with its path and size, closed on destruction; movable.
struct FileHandle {
  std::string path;
  int fd = -1;
  uint64_t size = 0;
  FileHandle() = default;
  FileHandle(FileHandle&& other) noexcept;
  FileHandle& operator=(FileHandle&& other) noexcept;
  ~FileHandle();
};
}  // namespace detail

// A file written front to back (created or truncated on open).
class OutputFile {
 public:
  explicit OutputFile(std::string path);
  ~OutputFile() = default;  // closes without syncing or throwing
  OutputFile(OutputFile&& other) noexcept = default;
  OutputFile& operator=(OutputFile&& other) noexcept = default;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const void* data, size_t size);  // all of it, or throws
  uint64_t size() const { return h_.size; }   // bytes written so far
  void sync_and_close();                      // fsync then close; throws on failure
  const std::string& path() const { return h_.path; }

 private:
  detail::FileHandle h_;
};

// A regular file opened read-only; reads outside [0, size()) are errors, never short reads.
class InputFile {
 public:
  explicit InputFile(std::string path);
  ~InputFile() = default;
  InputFile(InputFile&& other) noexcept = default;
  InputFile& operator=(InputFile&& other) noexcept = default;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return h_.size; }  // from fstat at open
  void read_at(uint64_t offset, void* dst, uint64_t n) const;
  std::string read_string(uint64_t offset, uint64_t n) const;
  const std::string& path() const { return h_.path; }

 private:
  detail::FileHandle h_;
};

// The crc32c of bytes [offset, offset + n) of `file`, read in pieces of at most 16 MiB.
uint32_t crc32c_of_range(const InputFile& file, uint64_t offset, uint64_t n);

// Throws unless name is 1..255 characters of [A-Za-z0-9._-] not starting with '.' (so neither
// "." nor ".."); the error starts with `what`, e.g. "files[2] in 'ckpt/manifest.json'".
void check_plain_file_name(std::string_view name, std::string_view what);

namespace detail {
// Throws "'<path>' is truncated: needs bytes [offset, offset + n) but has file_size bytes"
// (naming `who` in brackets) unless that range lies inside the file.
void check_file_range(uint64_t offset, uint64_t n, uint64_t file_size, std::string_view path,
                      const char* who);
}  // namespace detail

}  // namespace nnx::checkpoint
