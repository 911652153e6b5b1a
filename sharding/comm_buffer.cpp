// The buffer cache: free blocks by byte size (rounded up to whole pages), under one mutex.
#include <nnx/sharding/comm_buffer.h>

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/accumulate.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>

namespace nnx {

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kMaxCachedBytes = size_t{512} << 20;

struct Cache {
  std::mutex mutex;
  std::multimap<size_t, void*> free_blocks;
  size_t cached_bytes = 0;
};

Cache& cache() {
  static auto* c = new Cache;  // never destroyed: tensors may be freed after static destructors
  return *c;
}

void* take(size_t bytes) {
  {
    Cache& c = cache();
    std::lock_guard lock(c.mutex);
    if (auto it = c.free_blocks.find(bytes); it != c.free_blocks.end()) {
      void* block = it->second;
      c.free_blocks.erase(it);
      c.cached_bytes -= bytes;
      return block;
    }
  }
  void* block = std::aligned_alloc(64, bytes);
  if (block == nullptr) throw std::bad_alloc();
  return block;
}

void give_back(void* block, size_t bytes) {
  Cache& c = cache();
  {
    std::lock_guard lock(c.mutex);
    if (c.cached_bytes + bytes <= kMaxCachedBytes) {
      c.free_blocks.emplace(bytes, block);
      c.cached_bytes += bytes;
      return;
    }
  }
  std::free(block);
}

}  // namespace

at::Tensor comm_buffer(at::IntArrayRef sizes, const at::TensorOptions& options) {
  // Device memory already comes from LibTorch's caching allocator.
  if (!options.device().is_cpu()) return at::empty(sizes, options);
  const size_t wanted = c10::multiply_integers(sizes) * options.dtype().itemsize();
  const size_t bytes = std::max<size_t>(kPage, (wanted + kPage - 1) / kPage * kPage);
  void* block = take(bytes);
  return at::from_blob(block, sizes, [bytes](void* p) { give_back(p, bytes); },
                       options);
}

}  // namespace nnx
