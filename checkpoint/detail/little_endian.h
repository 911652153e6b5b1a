// 64-bit little-endian integers in byte buffers (safetensors' header length, CRC words).
#pragma once

#include <cstdint>

namespace nnx::checkpoint::detail {

inline uint64_t load_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

inline void store_le64(uint64_t v, unsigned char* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

}  // namespace nnx::checkpoint::detail
