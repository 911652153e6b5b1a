// IdxFile: records from an IDX file (the MNIST / Fashion-MNIST format), plain or gzip-compressed.
// A plain file is read by record (each process reads only the rows it asks for); a .gz file
// cannot be read by offset, so it is decompressed into memory once when opened.
#pragma once

#include <nnx/data/source.h>

#include <memory>
#include <string>
#include <vector>

namespace nnx::data {

class IdxFile : public Source {
 public:
  // Checks the header (magic, element type, dims) and that the data size matches it exactly:
  // a truncated file or one with trailing bytes is an error naming the file.
  explicit IdxFile(std::string path);
  ~IdxFile() override;
  IdxFile(const IdxFile&) = delete;
  IdxFile& operator=(const IdxFile&) = delete;

  int64_t size() const override { return dims_.empty() ? 0 : dims_[0]; }
  std::vector<int64_t> record_shape() const override;
  at::ScalarType dtype() const override { return dtype_; }
  at::Tensor read(const std::vector<int64_t>& indices) const override;
  std::string name() const override { return path_; }
  const std::vector<int64_t>& dims() const { return dims_; }

 private:
  void read_record(int64_t index, void* out) const;

  std::string path_;
  std::vector<int64_t> dims_;
  at::ScalarType dtype_;
  int64_t element_size_ = 1;
  int64_t record_bytes_ = 0;
  int64_t data_offset_ = 0;
  int fd_ = -1;                     // plain files: read by offset
  std::vector<unsigned char> data_;  // gzip files: the decompressed data after the header
};

// The whole file as one tensor.
at::Tensor read_idx(const std::string& path);

}  // namespace nnx::data
