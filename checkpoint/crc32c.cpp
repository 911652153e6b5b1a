// CRC-32C: slicing-by-8 tables built at compile time, and an SSE4.2 path picked at run time.
#include <nnx/checkpoint/crc32c.h>

#include <nnx/checkpoint/detail/little_endian.h>

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace nnx::checkpoint {
namespace {

using detail::load_le64;

constexpr uint32_t kPolynomial = 0x82F63B78;  // Castagnoli, bit-reflected

// kTables[k][b]: the CRC of byte b followed by k zero bytes (slicing-by-8).
constexpr std::array<std::array<uint32_t, 256>, 8> make_crc_tables() {
  std::array<std::array<uint32_t, 256>, 8> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1) ? kPolynomial : 0);
    t[0][b] = c;
  }
  for (int k = 1; k < 8; ++k)
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  return t;
}
constexpr auto kTables = make_crc_tables();

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const unsigned char* p, size_t n,
                                                        uint32_t crc) {
  uint64_t c = ~crc;
  for (; n > 0 && reinterpret_cast<uintptr_t>(p) % 8 != 0; --n) c = _mm_crc32_u8(c, *p++);
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
  }
  for (; n > 0; --n) c = _mm_crc32_u8(c, *p++);
  return ~static_cast<uint32_t>(c);
}

bool has_sse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

namespace detail {

uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc) {
  auto p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  for (; size >= 8; size -= 8, p += 8) {
    uint64_t v = load_le64(p) ^ c;
    c = kTables[7][v & 0xFF] ^ kTables[6][(v >> 8) & 0xFF] ^ kTables[5][(v >> 16) & 0xFF] ^
        kTables[4][(v >> 24) & 0xFF] ^ kTables[3][(v >> 32) & 0xFF] ^ kTables[2][(v >> 40) & 0xFF] ^
        kTables[1][(v >> 48) & 0xFF] ^ kTables[0][v >> 56];
  }
  for (; size > 0; --size) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xFF];
  return ~c;
}

bool crc32c_uses_hardware() {
#if defined(__x86_64__)
  return has_sse42();
#else
  return false;
#endif
}

}  // namespace detail

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
#if defined(__x86_64__)
  if (has_sse42()) return crc32c_sse42(static_cast<const unsigned char*>(data), size, crc);
#endif
  return detail::crc32c_portable(data, size, crc);
}

}  // namespace nnx::checkpoint
