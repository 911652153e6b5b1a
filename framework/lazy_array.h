// LazyArray: an array described by shape, dtype and a block generator, with its metadata.
// Variables materialize it: the whole array today, only the local shard once a mesh is set,
// or no storage at all inside eval_shape.
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
// The Array a variable holds for `init`: the whole array, or only shape and dtype inside
// eval_shape (no storage, nothing computed).
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
