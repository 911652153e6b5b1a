// mallopt once per process, unless the user chose otherwise.
#include <nnx/sharding/detail/allocator_tuning.h>

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace nnx::detail {

namespace {

bool user_chose() {
  const char* off = std::getenv("NNX_MALLOC_TUNING");
  if (off != nullptr && std::strcmp(off, "0") == 0) return true;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "malloc") != nullptr) return true;
  return std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr ||
         std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr;
}

}  // namespace

void tune_allocator_once() {
  static std::atomic<bool> done{false};
  if (done.exchange(true) || user_chose()) return;
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

}  // namespace nnx::detail
