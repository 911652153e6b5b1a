// The buffer cache: free blocks by byte size (rounded up to whole pages), under one mutex.
#include <nnx/sharding/comm_buffer.h>

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/accumulate.h>

#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace nnx {

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kMaxCachedBytes = size_t{512} << 20;
// Each block starts with a line holding its byte size, so that the tensor's deleter is a plain
// function of the block (no captured state to allocate per call).
constexpr size_t kHeader = 64;

struct Cache {
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;  // by byte size; lists keep capacity
  size_t cached_bytes = 0;
};

Cache& cache() {
  static auto* c = new Cache;  // never destroyed: tensors may be freed after static destructors
  return *c;
}

// A block of `bytes` after its header: from the cache, else new.
void* take(size_t bytes) {
  {
    Cache& c = cache();
    std::lock_guard lock(c.mutex);
    if (auto it = c.free_blocks.find(bytes); it != c.free_blocks.end() && !it->second.empty()) {
      void* block = it->second.back();
      it->second.pop_back();
      c.cached_bytes -= bytes;
      return block;
    }
  }
  void* block = std::aligned_alloc(kHeader, kHeader + bytes);
  if (block == nullptr) throw std::bad_alloc();
  *static_cast<size_t*>(block) = bytes;
  return block;
}

// The tensor's deleter: the block goes back to the cache, or to the system past the cap.
void give_back(void* block) {
  const size_t bytes = *static_cast<size_t*>(block);
  Cache& c = cache();
  {
    std::lock_guard lock(c.mutex);
    if (c.cached_bytes + bytes <= kMaxCachedBytes) {
      try {
        c.free_blocks[bytes].push_back(block);
        c.cached_bytes += bytes;
        return;
      } catch (const std::bad_alloc&) {  // a deleter may not throw: the block goes back instead
      }
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
  return at::for_blob(static_cast<char*>(block) + kHeader, sizes)
      .context(block, &give_back)
      .options(options)
      .make_tensor();
}

}  // namespace nnx
