// IDX: a 4-byte magic (0, 0, element type, number of dims), the dims as big-endian uint32,
// then the elements row-major, big-endian.
#include <nnx/data/idx_file.h>

#include <nnx/core/error.h>
#include <nnx/core/shape.h>
#include <nnx/data/detail/file_read.h>

#include <ATen/ATen.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace nnx::data {
namespace {

struct ElementType {
  at::ScalarType dtype;
  int64_t size;
};

ElementType element_type(const std::string& path, unsigned char code) {
  switch (code) {
    case 0x08: return {at::kByte, 1};
    case 0x09: return {at::kChar, 1};
    case 0x0B: return {at::kShort, 2};
    case 0x0C: return {at::kInt, 4};
    case 0x0D: return {at::kFloat, 4};
    case 0x0E: return {at::kDouble, 8};
  }
  NNX_FAIL("{}: unknown IDX element type 0x{:02x} (expected 0x08, 0x09, 0x0B, 0x0C, 0x0D or 0x0E); "
           "is it an IDX file?", path, code);
}

bool is_gzip(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  NNX_CHECK(f != nullptr, "cannot open {}: {}", path, std::strerror(errno));
  unsigned char magic[2] = {0, 0};
  size_t got = std::fread(magic, 1, 2, f);
  std::fclose(f);
  return got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

std::vector<unsigned char> gunzip(const std::string& path) {
  gzFile gz = gzopen(path.c_str(), "rb");
  NNX_CHECK(gz != nullptr, "cannot open {}: {}", path, std::strerror(errno));
  std::vector<unsigned char> out;
  unsigned char buffer[1 << 16];
  while (true) {
    int n = gzread(gz, buffer, sizeof buffer);
    if (n < 0) {
      int code = 0;
      std::string message = gzerror(gz, &code);
      gzclose(gz);
      NNX_FAIL("{}: the gzip data is damaged ({}); download or install the file again", path,
               message);
    }
    if (n == 0) break;
    out.insert(out.end(), buffer, buffer + n);
  }
  // A stream cut short ends like a whole one, but leaves Z_BUF_ERROR behind.
  int code = Z_OK;
  std::string message = gzerror(gz, &code);
  gzclose(gz);
  NNX_CHECK(code == Z_OK, "{}: the gzip data is damaged ({}); download or install the file again",
            path, code == Z_BUF_ERROR ? "it ends early" : message);
  return out;
}

uint32_t big_endian_u32(const unsigned char* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

}  // namespace

IdxFile::IdxFile(std::string path) : path_(std::move(path)) {
  detail::CloseOnError close_on_error(fd_);
  std::vector<unsigned char> header(4);
  int64_t total_bytes = 0;
  if (is_gzip(path_)) {
    data_ = gunzip(path_);
    total_bytes = static_cast<int64_t>(data_.size());
    NNX_CHECK(total_bytes >= 4, "{}: {} bytes is too short for an IDX header", path_, total_bytes);
    std::memcpy(header.data(), data_.data(), 4);
  } else {
    fd_ = detail::open_for_reading(path_, &total_bytes);
    NNX_CHECK(total_bytes >= 4, "{}: {} bytes is too short for an IDX header", path_, total_bytes);
    detail::read_at(fd_, header.data(), 4, 0, path_);
  }
  NNX_CHECK(header[0] == 0 && header[1] == 0,
            "{}: not an IDX file (the first two bytes are 0x{:02x} 0x{:02x}, expected 0 0)", path_,
            header[0], header[1]);
  auto type = element_type(path_, header[2]);
  dtype_ = type.dtype;
  element_size_ = type.size;
  const int ndims = header[3];
  NNX_CHECK(ndims >= 1, "{}: an IDX file with 0 dims holds no records", path_);
  data_offset_ = 4 + 4 * int64_t{ndims};
  NNX_CHECK(total_bytes >= data_offset_, "{}: truncated inside its header ({} of {} bytes)", path_,
            total_bytes, data_offset_);
  std::vector<unsigned char> dims_bytes(4 * ndims);
  if (fd_ >= 0)
    detail::read_at(fd_, dims_bytes.data(), 4 * ndims, 4, path_);
  else
    std::memcpy(dims_bytes.data(), data_.data() + 4, 4 * ndims);
  // The data's size in bytes, checked for overflow: a corrupt header's dims may multiply past
  // 2^63 and wrap to the file's size.
  int64_t expected = element_size_;
  bool overflows = false;
  for (int d = 0; d < ndims; ++d) {
    dims_.push_back(big_endian_u32(dims_bytes.data() + 4 * d));
    overflows = overflows || __builtin_mul_overflow(expected, dims_.back(), &expected);
  }
  overflows = overflows || __builtin_add_overflow(expected, data_offset_, &expected);
  NNX_CHECK(!overflows, "{}: the header promises records of shape {} times {}, more than 2^63 "
            "bytes in all; the file is corrupt", path_, nnx::to_string(record_shape()), dims_[0]);
  record_bytes_ = element_size_;
  for (size_t d = 1; d < dims_.size(); ++d) record_bytes_ *= dims_[d];
  NNX_CHECK(total_bytes == expected,
            "{}: the header promises {} records of shape {} ({} bytes in all) but the file has {} "
            "bytes{}; the file is {}", path_, dims_[0], nnx::to_string(record_shape()), expected,
            total_bytes, data_.empty() ? "" : " (decompressed)",
            total_bytes < expected ? "truncated" : "followed by extra bytes");
  close_on_error.release();
}

IdxFile::~IdxFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<int64_t> IdxFile::record_shape() const {
  return std::vector<int64_t>(dims_.begin() + 1, dims_.end());
}

void IdxFile::read_record(int64_t index, void* out) const {
  const int64_t offset = data_offset_ + index * record_bytes_;
  if (fd_ >= 0)
    detail::read_at(fd_, out, record_bytes_, offset, path_);
  else
    std::memcpy(out, data_.data() + offset, static_cast<size_t>(record_bytes_));
}

at::Tensor IdxFile::read(const std::vector<int64_t>& indices) const {
  detail::check_indices(*this, indices);
  std::vector<int64_t> shape{static_cast<int64_t>(indices.size())};
  for (int64_t d : record_shape()) shape.push_back(d);
  auto out = at::empty(shape, at::TensorOptions().dtype(dtype_));
  auto* base = static_cast<char*>(out.data_ptr());
  for (size_t i = 0; i < indices.size(); ++i) read_record(indices[i], base + i * record_bytes_);
  // IDX stores multi-byte elements big-endian.
  if (element_size_ > 1) {
    const int64_t n = out.numel();
    for (int64_t e = 0; e < n; ++e) {
      char* p = base + e * element_size_;
      std::reverse(p, p + element_size_);
    }
  }
  return out;
}

at::Tensor read_idx(const std::string& path) {
  IdxFile file(path);
  std::vector<int64_t> all(static_cast<size_t>(file.size()));
  for (int64_t i = 0; i < file.size(); ++i) all[i] = i;
  return file.read(all);
}

}  // namespace nnx::data
