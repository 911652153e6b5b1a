// The gradient reduction the framework inserts: a parameter replicated along mesh axes ends
// the backward pass with a partial gradient there (design.md §4); summing over those axes gives
// the exact gradient, laid out as the parameter.
#pragma once

#include <nnx/sharding/array.h>

#include <string>
#include <vector>

namespace nnx {

// The mesh axes (of size > 1) along which `a` is replicated: a gradient there is partial.
std::vector<std::string> replica_axes(const Array& a);

// The exact gradient of `param` from this process's local gradient of its local block.
Array reduce_gradient(const Array& param, const at::Tensor& local_grad);

// The local cotangent that seeds backward from a scalar loss: 1 where the loss is a pending
// sum; for a replicated loss, 1 on coordinate 0 of each replicated axis and 0 elsewhere.
at::Tensor loss_cotangent(const Array& loss);

}  // namespace nnx
