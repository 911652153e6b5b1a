// The host buffer cache behind collectives' returned tensors (comm_buffer.h).
#include "../catch_after_torch.h"

#include <nnx/sharding/comm_buffer.h>

#include <torch/types.h>

#include <cstdint>
#include <cstdlib>

TEST_CASE("a freed host collective buffer comes back for the next call of its size") {
  auto first = nnx::comm_buffer({1000}, torch::kFloat);
  const void* memory = first.data_ptr();
  CHECK(reinterpret_cast<std::uintptr_t>(memory) % 64 == 0);
  first.fill_(3);
  first.reset();
  // Allocations of the same size in between would take a block the system had back.
  void* others[] = {std::aligned_alloc(64, 64 + 4096), std::malloc(64 + 4096)};
  // 4,000 and 3,996 bytes both round to one page: the freed block, in another shape and dtype.
  auto again = nnx::comm_buffer({999}, torch::kInt);
  for (void* other : others) std::free(other);
  CHECK(again.data_ptr() == memory);
  CHECK(again.sizes() == torch::IntArrayRef{999});
  CHECK(again.scalar_type() == torch::kInt);
  CHECK(again.is_contiguous());
  CHECK(again.is_cpu());
  CHECK_FALSE(again.requires_grad());
}

TEST_CASE("a host collective buffer stays out of the cache while a view of it lives") {
  auto buffer = nnx::comm_buffer({2, 1500}, torch::kFloat);
  buffer.fill_(7);
  const auto view = buffer[1].narrow(0, 10, 5);
  const void* memory = buffer.data_ptr();
  buffer.reset();
  auto next = nnx::comm_buffer({3000}, torch::kFloat);
  CHECK(next.data_ptr() != memory);
  next.fill_(-1);
  CHECK(torch::equal(view, torch::full({5}, 7.0f)));
}
