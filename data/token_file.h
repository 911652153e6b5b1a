// TokenFile: fixed-length windows of a flat token file, for language models. Record i is the
// seq_len + 1 tokens starting at begin + i * stride (inputs and their next-token targets);
// tokens are read by offset, so each process reads only its windows.
#pragma once

#include <nnx/data/source.h>

#include <string>

namespace nnx::data {

struct TokenFileOptions {
  int64_t seq_len = 0;                   // tokens per input; records hold seq_len + 1
  int64_t stride = 0;                    // tokens between record starts; 0 means seq_len
  // As stored: kByte (bytes, characters), kShort (read as uint16, as GPT-2 .bin files), kInt.
  at::ScalarType token_dtype = at::kByte;
  int64_t begin = 0;                     // first token used (to hold out a validation split)
  int64_t end = -1;                      // one past the last token used; -1: the file's end
};

class TokenFile : public Source {
 public:
  // Records come out as int64 token ids, [seq_len + 1].
  TokenFile(std::string path, TokenFileOptions options);
  ~TokenFile() override;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t size() const override { return records_; }
  std::vector<int64_t> record_shape() const override { return {options_.seq_len + 1}; }
  at::ScalarType dtype() const override { return at::kLong; }
  at::Tensor read(const std::vector<int64_t>& indices) const override;
  std::string name() const override { return path_; }
  int64_t num_tokens() const { return options_.end - options_.begin; }

 private:
  std::string path_;
  TokenFileOptions options_;
  int64_t token_bytes_ = 1;
  int64_t records_ = 0;
  int fd_ = -1;
};

}  // namespace nnx::data
