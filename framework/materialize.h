// materialize: the Array a variable holds for a LazyArray: the whole array, only the local block
// under a MeshContext, or no storage at all inside eval_shape (the abstract array keeps the
// LazyArray for later).
#pragma once

#include <nnx/sharding/lazy_array.h>

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
