// Array: the value of a variable. A local tensor plus the global shape and an optional
// NamedSharding; an abstract Array (inside eval_shape) has shape and dtype but no storage.
#pragma once

#include <nnx/framework/shape.h>
#include <nnx/sharding/named_sharding.h>

#include <ATen/core/Tensor.h>

#include <optional>

namespace nnx {

class Array {
 public:
  Array() = default;
  // A whole (unsharded) array.
  Array(at::Tensor full);  // NOLINT: implicit, a tensor is an Array on one device
  // Shape and dtype only: a tensor on the meta device stands in for the values.
  static Array abstract(const Shape& shape, at::ScalarType dtype);

  bool defined() const { return local_.defined(); }
  bool is_abstract() const;
  const Shape& shape() const { return shape_; }
  int64_t ndim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const { return nnx::numel(shape_); }
  at::ScalarType dtype() const;
  // This process's block of the array (today the whole array).
  const at::Tensor& local() const { return local_; }
  const std::optional<NamedSharding>& sharding() const { return sharding_; }
  void set_sharding(std::optional<NamedSharding> sharding) { sharding_ = std::move(sharding); }
  // The same global array description (shape, sharding) over another local tensor.
  Array with_local(at::Tensor local) const;

 private:
  at::Tensor local_;
  Shape shape_;
  std::optional<NamedSharding> sharding_;
};

std::string dtype_name(at::ScalarType dtype);  // JAX's spelling: float32, bfloat16, int64 ...

}  // namespace nnx
