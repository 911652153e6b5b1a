// Data test helpers: a scratch directory removed at scope exit, and IDX files written byte by
// byte (plain or gzip) so the reader is checked against the format, not against itself.
#pragma once

#include "../catch_after_torch.h"
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace nnx_test {

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag)
      : path_(std::filesystem::temp_directory_path() /
              ("nnx_data_" + tag + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// An IDX file: magic (0, 0, type, ndims), big-endian uint32 dims, then `payload` as given.
inline std::vector<unsigned char> idx_bytes(unsigned char type, const std::vector<uint32_t>& dims,
                                            const std::vector<unsigned char>& payload) {
  std::vector<unsigned char> out{0, 0, type, static_cast<unsigned char>(dims.size())};
  for (uint32_t d : dims)
    for (int shift : {24, 16, 8, 0}) out.push_back(static_cast<unsigned char>(d >> shift));
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

inline void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline void write_gzip(const std::string& path, const std::vector<unsigned char>& bytes) {
  gzFile gz = gzopen(path.c_str(), "wb");
  REQUIRE(gz != nullptr);
  REQUIRE(gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size())) ==
          static_cast<int>(bytes.size()));
  gzclose(gz);
}

}  // namespace nnx_test
