// The state the crash saver writes at each step: values that identify the step (about 2 MiB).
#pragma once

#include <nnx/nnx.h>

#include <torch/types.h>

namespace nnx_test {

inline nnx::State crash_state(int64_t step) {
  nnx::State s;
  s.add("big", nnx::Param(torch::arange(1 << 19, torch::kFloat) + static_cast<float>(step)));
  s.add("small", nnx::Param(torch::full({3}, static_cast<double>(step))));
  s.add("step", nnx::OptState(torch::tensor(step)));
  return s;
}

}  // namespace nnx_test
