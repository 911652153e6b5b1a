// LazyArray: an array described by shape, dtype and a block generator, with its metadata.
// Variables materialize it: the whole array, only the local block under a MeshContext, or no
// storage at all inside eval_shape (the abstract array keeps the LazyArray for later).
#pragma once

#include <nnx/framework/metadata.h>
#include <nnx/framework/shape.h>

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

namespace nnx {

class Array;
// The Array a variable holds for `init`: the whole array; this process's block laid out by the
// metadata's spec under a MeshContext; or, inside eval_shape, an abstract array keeping `init`.
Array materialize(const LazyArray& init);

namespace detail {
// True while eval_shape runs on this thread.
bool abstract_init_active();
// RAII: turns abstract initialization on (or, given false, off) for this thread while alive.
class AbstractInitScope {
 public:
  explicit AbstractInitScope(bool abstract = true);
  ~AbstractInitScope();
  AbstractInitScope(const AbstractInitScope&) = delete;
  AbstractInitScope& operator=(const AbstractInitScope&) = delete;

 private:
  bool previous_;
};
}  // namespace detail

}  // namespace nnx
