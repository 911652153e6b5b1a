// Array: the value of a variable, a global-view array. This process's block (a tensor) plus the
// global shape and, when sharded, the mesh, the spec (which mesh axes split which dim) and the
// mesh axes along which the value is a pending sum (Partial). Without a mesh it is a thin
// wrapper over the whole tensor. An abstract Array (eval_shape) has shape and dtype only.
#pragma once

#include <nnx/core/shape.h>
#include <nnx/sharding/named_sharding.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace nnx {

struct LazyArray;

// How an array lies along one mesh axis: split along a dim, copied, or a pending sum.
struct Placement {
  enum class Kind { replicate, shard, partial };
  Kind kind = Kind::replicate;
  int64_t dim = -1;  // for shard

  static Placement Replicate() { return {}; }
  static Placement Shard(int64_t dim) { return {Kind::shard, dim}; }
  static Placement Partial() { return {Kind::partial, -1}; }
  bool is_shard() const { return kind == Kind::shard; }
  bool is_partial() const { return kind == Kind::partial; }
  bool is_replicate() const { return kind == Kind::replicate; }
  std::string to_string() const;  // R, S(0), P
  bool operator==(const Placement&) const = default;
};

// What arrays laid out alike share: the global shape, the spec over mesh axes (one entry per
// dim) and the axes of a pending sum. Immutable, so Arrays hold it by pointer: copying an Array
// or giving it another block allocates nothing, and ops that plan once reuse their output's.
class ArrayLayout {
 public:
  ArrayLayout();  // of a scalar
  ArrayLayout(Shape shape, PartitionSpec spec, std::vector<std::string> partial_axes);
  const Shape& shape() const { return shape_; }
  const PartitionSpec& spec() const { return spec_; }
  const std::vector<std::string>& partial_axes() const { return partial_axes_; }
  uint64_t hash() const { return hash_; }  // of all three, computed once
  bool whole() const { return whole_; }     // no dim split and nothing pending
  bool operator==(const ArrayLayout&) const = default;

 private:
  Shape shape_;
  PartitionSpec spec_;
  std::vector<std::string> partial_axes_;
  uint64_t hash_ = 0;
  bool whole_ = true;
};

class Array {
 public:
  Array() = default;
  // A whole array on no mesh.
  explicit Array(at::Tensor full);
  // Shape and dtype only: a meta tensor of the global shape stands in for the values.
  static Array abstract(const Shape& shape, at::ScalarType dtype);
  // An abstract array that keeps its initializer, so any block can be computed later
  // (eval_shape keeps them; materialize computes each process's block).
  static Array abstract(std::shared_ptr<const LazyArray> init);
  // This process's block of a sharded array, as laid out by `sharding` (no communication).
  // `partial_axes`: mesh axes along which the blocks are still to be summed.
  static Array from_local(at::Tensor local, Shape global_shape, NamedSharding sharding,
                          std::vector<std::string> partial_axes = {});
  // The same with a layout already checked against `mesh` (an op's plan keeps its output's);
  // only the block's shape is checked.
  static Array from_layout(at::Tensor local, std::shared_ptr<const Mesh> mesh,
                           std::shared_ptr<const ArrayLayout> layout);

  bool defined() const { return local_.defined(); }
  bool is_abstract() const;
  const Shape& shape() const { return layout_->shape(); }
  int64_t ndim() const { return static_cast<int64_t>(shape().size()); }
  int64_t numel() const { return nnx::numel(shape()); }
  at::ScalarType dtype() const;
  // This process's block of the array (the whole array when not sharded).
  const at::Tensor& local() const { return local_; }
  at::Tensor to_local() const { return local_; }

  // Sharding: absent for an array on no mesh.
  std::optional<NamedSharding> sharding() const;
  void set_sharding(std::optional<NamedSharding> sharding);
  const std::shared_ptr<const Mesh>& mesh() const { return mesh_; }
  // The spec over mesh axes, one entry per dim (all none when not sharded).
  const PartitionSpec& spec() const { return layout_->spec(); }
  const std::vector<std::string>& partial_axes() const { return layout_->partial_axes(); }
  // Shape, spec and pending axes together, shared with the arrays laid out alike.
  const std::shared_ptr<const ArrayLayout>& layout() const { return layout_; }
  // One placement per mesh axis, in mesh order.
  std::vector<Placement> placements() const;
  // True when every process holds the whole value (no Shard, no Partial).
  bool is_fully_replicated() const;
  // The global index box of this process's block.
  Box local_box() const;

  // x[i]: nnx::select(x, 0, i), dim 0 dropped (see ops.h; slices: nnx::slice).
  Array operator[](int64_t index) const;

  // The same global array description over another local tensor.
  Array with_local(at::Tensor local) const;
  // The initializer an abstract array keeps (null when none).
  const std::shared_ptr<const LazyArray>& initializer() const { return init_; }

 private:
  static const std::shared_ptr<const ArrayLayout>& empty_layout();
  Array(at::Tensor local, std::shared_ptr<const ArrayLayout> layout,
        std::shared_ptr<const Mesh> mesh)
      : local_(std::move(local)), layout_(std::move(layout)), mesh_(std::move(mesh)) {}
  at::Tensor local_;
  std::shared_ptr<const ArrayLayout> layout_ = empty_layout();  // never null
  std::shared_ptr<const Mesh> mesh_;
  std::shared_ptr<const LazyArray> init_;
};

std::string dtype_name(at::ScalarType dtype);  // JAX's spelling: float32, bfloat16, int64 ...

// The block `box` of a whole tensor (a view).
at::Tensor slice(const at::Tensor& full, const Box& box);

// The block of an array of `shape` laid out by `spec` (mesh axes) that the process at mesh
// `coordinates` holds: dim d split row-major over its axes, major first.
Box block_of(const Shape& shape, const PartitionSpec& spec, const Mesh& mesh,
             const std::vector<int64_t>& coordinates);

}  // namespace nnx
