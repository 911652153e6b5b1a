// CRC-32C against the published check values (RFC 3720 B.4), chaining, and agreement of the
// SSE4.2 and table paths.
#include "../catch_after_torch.h"

#include <nnx/checkpoint/crc32c.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

using nnx::checkpoint::crc32c;
using nnx::checkpoint::detail::crc32c_portable;

namespace {
std::vector<unsigned char> bytes_from(int first, int step) {
  std::vector<unsigned char> v(32);
  for (int i = 0; i < 32; ++i) v[i] = static_cast<unsigned char>(first + step * i);
  return v;
}
}  // namespace

TEST_CASE("crc32c gives the published CRC-32C check values on both paths") {
  INFO("hardware path in use: " << nnx::checkpoint::detail::crc32c_uses_hardware());
  const std::string check = "123456789";
  const std::vector<unsigned char> zeros(32, 0x00), ones(32, 0xFF);
  const auto up = bytes_from(0, 1), down = bytes_from(31, -1);
  for (auto f : {&crc32c, &crc32c_portable}) {
    CHECK(f(check.data(), check.size(), 0) == 0xE3069283u);
    CHECK(f(zeros.data(), 32, 0) == 0x8A9136AAu);
    CHECK(f(ones.data(), 32, 0) == 0x62A8AB43u);
    CHECK(f(up.data(), 32, 0) == 0x46DD794Eu);
    CHECK(f(down.data(), 32, 0) == 0x113FDB5Cu);
    CHECK(f(nullptr, 0, 0) == 0u);
    CHECK(f(nullptr, 0, 0x12345678u) == 0x12345678u);
  }
}

TEST_CASE("crc32c continues from a previous crc so split buffers give the whole crc") {
  const std::string check = "123456789";
  for (size_t cut = 0; cut <= check.size(); ++cut) {
    uint32_t first = crc32c(check.data(), cut);
    CHECK(crc32c(check.data() + cut, check.size() - cut, first) == 0xE3069283u);
    uint32_t first_p = crc32c_portable(check.data(), cut);
    CHECK(crc32c_portable(check.data() + cut, check.size() - cut, first_p) == 0xE3069283u);
  }
  const std::vector<unsigned char> zeros(32, 0x00);
  CHECK(crc32c(zeros.data() + 13, 19, crc32c(zeros.data(), 13)) == 0x8A9136AAu);
}

TEST_CASE("the SSE4.2 and table paths agree on every length and alignment") {
  std::mt19937 gen(7);
  std::vector<unsigned char> buf(5000);
  for (auto& b : buf) b = static_cast<unsigned char>(gen());
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 130; ++n) lengths.push_back(n);
  for (size_t n : {255u, 256u, 257u, 1000u, 1023u, 4096u, 4983u}) lengths.push_back(n);
  for (size_t offset = 0; offset < 16; ++offset)
    for (size_t n : lengths) {
      uint32_t seed = static_cast<uint32_t>(gen());
      INFO("offset " << offset << " length " << n << " seed " << seed);
      REQUIRE(crc32c(buf.data() + offset, n, seed) ==
              crc32c_portable(buf.data() + offset, n, seed));
    }
}
