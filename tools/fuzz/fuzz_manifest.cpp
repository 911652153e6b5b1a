// libFuzzer target: parse_manifest on arbitrary bytes. nnx::Error is the expected way to reject
// input; any other exception, crash or sanitizer report is a finding.
#include <nnx/checkpoint/manifest.h>
#include <nnx/core/error.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    nnx::checkpoint::parse_manifest(std::string_view(reinterpret_cast<const char*>(data), size),
                                    "fuzz/manifest.json");
  } catch (const nnx::Error&) {
  }
  return 0;
}
