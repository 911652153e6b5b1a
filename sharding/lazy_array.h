// LazyArray: an array described by shape, dtype and a block generator, with its metadata. An
// abstract Array keeps one, so any block can be computed later (framework/materialize.h).
#pragma once

#include <nnx/sharding/metadata.h>
#include <nnx/core/shape.h>

#include <ATen/core/Tensor.h>

#include <functional>

namespace nnx {

struct LazyArray {
  Shape shape;
  at::ScalarType dtype = at::kFloat;
  std::function<at::Tensor(const Box&)> block;  // values of one block of the global array
  Metadata metadata;
};

}  // namespace nnx

