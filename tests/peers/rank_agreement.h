// A gathered value checked equal, bit for bit, on every rank before rank 0 writes it: rank 0's
// copy alone would hide another rank's wrong copy of a replicated value (replicas that differ
// drift apart in training).
#pragma once

#include <nnx/nnx.h>

#include <torch/types.h>

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace nnx_peers {

// The tensor's bits as integers of its element size (NaN payloads and -0.0 included).
inline at::Tensor bits_of(const at::Tensor& t) {
  switch (t.element_size()) {
    case 8: return t.view(at::kLong);
    case 4: return t.view(at::kInt);
    case 2: return t.view(at::kShort);
    default: return t.view(at::kByte);
  }
}

inline at::Tensor agreed_on_every_rank(const at::Tensor& whole, const std::string& what) {
  const auto world = nnx::Communicator::world();
  if (world.size() == 1) return whole;
  const at::Tensor mine = whole.detach().contiguous().cpu();
  const at::Tensor all = bits_of(world.all_gather(mine.unsqueeze(0), 0));
  for (int64_t r = 1; r < world.size(); ++r)
    if (!torch::equal(all[r], all[0]))
      throw std::runtime_error(fmt::format("{}: rank {} holds another value than rank 0", what, r));
  return whole;
}

}  // namespace nnx_peers
