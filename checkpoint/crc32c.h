// CRC-32C (Castagnoli), the checksum of checkpoint chunks: SSE4.2 instructions when the CPU has
// them, slicing-by-8 tables otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

namespace nnx::checkpoint {

// CRC-32C of `size` bytes, continuing from `crc` (0 to start), so that
// crc32c(b, nb, crc32c(a, na)) is the CRC of a followed by b.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

namespace detail {
// The table path, always available; crc32c() must agree with it.
uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc = 0);
// Whether crc32c() uses the SSE4.2 instruction on this CPU.
bool crc32c_uses_hardware();
}  // namespace detail

}  // namespace nnx::checkpoint
