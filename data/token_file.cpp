// TokenFile: windows read with pread, little-endian tokens widened to int64.
#include <nnx/data/token_file.h>

#include <nnx/core/error.h>
#include <nnx/data/detail/file_read.h>

#include <ATen/ATen.h>
#include <unistd.h>

namespace nnx::data {

TokenFile::TokenFile(std::string path, TokenFileOptions options)
    : path_(std::move(path)), options_(options) {
  NNX_CHECK(options_.seq_len > 0, "{}: TokenFileOptions.seq_len must be positive, got {}", path_,
            options_.seq_len);
  if (options_.stride == 0) options_.stride = options_.seq_len;
  NNX_CHECK(options_.stride > 0, "{}: TokenFileOptions.stride must be positive, got {}", path_,
            options_.stride);
  switch (options_.token_dtype) {
    case at::kByte: token_bytes_ = 1; break;
    case at::kShort: token_bytes_ = 2; break;
    case at::kInt: token_bytes_ = 4; break;
    default:
      NNX_FAIL("{}: token_dtype must be kByte, kShort or kInt, got {}", path_,
               c10::toString(options_.token_dtype));
  }
  int64_t file_bytes = 0;
  fd_ = detail::open_for_reading(path_, &file_bytes);
  detail::CloseOnError close_on_error(fd_);
  NNX_CHECK(file_bytes % token_bytes_ == 0,
            "{}: {} bytes is not a whole number of {}-byte tokens; is token_dtype right?", path_,
            file_bytes, token_bytes_);
  const int64_t file_tokens = file_bytes / token_bytes_;
  if (options_.end < 0) options_.end = file_tokens;
  NNX_CHECK(0 <= options_.begin && options_.begin <= options_.end && options_.end <= file_tokens,
            "{}: the token range [{}, {}) does not fit the file's {} tokens", path_,
            options_.begin, options_.end, file_tokens);
  const int64_t usable = options_.end - options_.begin - (options_.seq_len + 1);
  NNX_CHECK(usable >= 0, "{}: {} tokens cannot fill one record of seq_len + 1 = {} tokens", path_,
            options_.end - options_.begin, options_.seq_len + 1);
  records_ = usable / options_.stride + 1;
  close_on_error.release();
}

TokenFile::~TokenFile() {
  if (fd_ >= 0) ::close(fd_);
}

at::Tensor TokenFile::read(const std::vector<int64_t>& indices) const {
  detail::check_indices(*this, indices);
  const int64_t width = options_.seq_len + 1;
  auto raw = at::empty({static_cast<int64_t>(indices.size()), width},
                       at::TensorOptions().dtype(options_.token_dtype));
  auto* base = static_cast<char*>(raw.data_ptr());
  const int64_t bytes = width * token_bytes_;
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t offset = (options_.begin + indices[i] * options_.stride) * token_bytes_;
    detail::read_at(fd_, base + static_cast<int64_t>(i) * bytes, bytes, offset, path_);
  }
  at::Tensor ids = raw.to(at::kLong);
  if (token_bytes_ == 2) ids.bitwise_and_(0xFFFF);  // 2-byte tokens are unsigned (ids < 65536)
  return ids;
}

}  // namespace nnx::data
