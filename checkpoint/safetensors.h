// The safetensors file format: an 8-byte little-endian header length N, N bytes of JSON naming
// each tensor's dtype, shape and byte range, then the data section. Reader and writer.
#pragma once

#include <nnx/checkpoint/file_io.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace nnx::checkpoint {

constexpr uint64_t kMaxHeaderBytes = 100 << 20;

struct TensorEntry {
  std::string name;
  std::string dtype;  // "F32", "BF16", ... (see dtype.h)
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range in the data section
};

struct SafetensorsHeader {
  std::vector<TensorEntry> tensors;  // sorted by begin
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + N: file offset of the data section
  uint64_t data_size = 0;

  // Throws naming the file and the tensor, with close names, when there is no such tensor.
  const TensorEntry& at(std::string_view name, std::string_view file) const;
  const TensorEntry* find(std::string_view name) const;
};

// Validates the JSON header of a file whose data section has data_size bytes: known dtypes,
// shapes, offsets inside the data section matching shape and dtype, no overlapping tensors.
SafetensorsHeader parse_safetensors_header(std::string_view json_text, uint64_t data_size,
                                           std::string_view file);
// A whole safetensors file held in memory, split and checked as read_safetensors_header does.
SafetensorsHeader parse_safetensors_bytes(std::string_view file_bytes, std::string_view label);
// Reads and validates the header of an open file; errors call the file `label`.
SafetensorsHeader read_safetensors_header(const InputFile& file, std::string_view label);

struct TensorToWrite {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const void* data;
  uint64_t nbytes;
};

struct WrittenTensor {
  std::string name;
  uint64_t file_offset;  // absolute offset of the tensor's first byte in the file
  uint64_t nbytes;
  uint32_t crc32c;  // of the tensor's bytes
};

struct TensorLayout {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
};

// Writes a safetensors file front to back: the header from the layouts (padded with spaces so
// the data section starts at a multiple of 8), then the tensors' bytes in order, in as many
// write() calls as suit the caller; finish() fsyncs and closes. Destroyed unfinished, it
// removes the file.
class SafetensorsWriter {
 public:
  SafetensorsWriter(std::string path, std::vector<TensorLayout> tensors,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
  void write(const void* data, uint64_t n);
  std::vector<WrittenTensor> finish();  // throws unless every tensor's bytes were written

 private:
  void next_tensor();
  std::string path_;
  std::vector<TensorLayout> tensors_;
  std::vector<uint64_t> nbytes_;
  std::unique_ptr<OutputFile> out_;
  std::vector<WrittenTensor> written_;
  uint64_t left_ = 0;  // bytes still due for the tensor being written (written_.back())
  bool finished_ = false;
};

// Writes the tensors back to back in the given order, as SafetensorsWriter does, fsyncs and
// closes. A failed write removes the file.
std::vector<WrittenTensor> write_safetensors(
    const std::string& path, const std::vector<TensorToWrite>& tensors,
    const std::map<std::string, std::string>& metadata = {});

}  // namespace nnx::checkpoint
