// libFuzzer target: the input is a whole safetensors file, split and validated in memory as
// read_safetensors_header does. Anything but an nnx::Error is a finding.
#include <nnx/checkpoint/safetensors.h>
#include <nnx/core/error.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    nnx::checkpoint::parse_safetensors_bytes(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.safetensors");
  } catch (const nnx::Error&) {
  }
  return 0;
}
