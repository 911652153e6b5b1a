// Initializer: a function from (key, global shape, dtype, block) to that block of the array,
// plus the metadata (sharding annotations) that with_partitioning/with_metadata attach.
#pragma once

#include <nnx/framework/materialize.h>
#include <nnx/sharding/metadata.h>
#include <nnx/core/random.h>

#include <functional>

namespace nnx {

struct Initializer {
  // Returns the values of `block` of the array of global `shape`: equal to that slice of the
  // whole array, whatever the block (this is what sharded initialization relies on). On a GPU
  // mesh the built-in initializers return device tensors (random::sampling_device()): wrap them
  // with tensor ops, not data_ptr loops.
  using Fn = std::function<at::Tensor(const random::Key& key, const Shape& shape,
                                      at::ScalarType dtype, const Box& block)>;
  Fn fn;
  Metadata metadata;

  // A lazily evaluated array: nothing is computed until a variable materializes its blocks.
  LazyArray operator()(const random::Key& key, Shape shape,
                       at::ScalarType dtype = at::kFloat) const;
  // The whole array at once (tests, small tensors).
  at::Tensor full(const random::Key& key, const Shape& shape,
                  at::ScalarType dtype = at::kFloat) const;
};

// Flax's LinearGeneral initialization: `init` draws the matrix [prod(shape[:in_dims]),
// prod(shape[in_dims:])] (so fans are those of the matrix), reshaped to the array's shape.
// in_dims = 0 draws the flat vector [prod(shape)].
Initializer as_matrix(Initializer init, size_t in_dims);

// Flax's nnx.with_partitioning: the same initializer, annotated with out_sharding = spec.
Initializer with_partitioning(Initializer init, PartitionSpec spec);
// Flax's nnx.with_metadata: the same initializer with the given metadata merged in
// (entries set in `metadata` override those already on `init`).
Initializer with_metadata(Initializer init, const Metadata& metadata);

}  // namespace nnx
