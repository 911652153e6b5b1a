// Raw little-endian tensors, as the Python side of a live peer writes and reads them with numpy's
// tofile and fromfile.
#pragma once

#include <torch/types.h>

#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace nnx_peers {

inline at::Tensor read_raw(const std::string& path, const std::vector<int64_t>& shape,
                           at::ScalarType dtype) {
  std::ifstream in(path, std::ios::binary);
  auto t = torch::empty(shape, dtype);
  in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  if (!in) throw std::runtime_error("cannot read " + path);
  return t;
}

inline void write_raw(const std::string& path, const at::Tensor& t) {
  std::ofstream out(path, std::ios::binary);
  auto c = t.contiguous();
  out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace nnx_peers
