// Initializer calls and the with_partitioning/with_metadata wrappers.
#include <nnx/framework/error.h>
#include <nnx/framework/initializer.h>

namespace nnx {

LazyArray Initializer::operator()(const random::Key& key, Shape shape,
                                  at::ScalarType dtype) const {
  NNX_CHECK(fn, "empty initializer: use one of nnx::initializers");
  auto f = fn;
  Shape global = shape;
  return LazyArray{std::move(shape), dtype,
                   [f, key, global, dtype](const Box& block) { return f(key, global, dtype, block); },
                   metadata};
}

at::Tensor Initializer::full(const random::Key& key, const Shape& shape,
                             at::ScalarType dtype) const {
  NNX_CHECK(fn, "empty initializer: use one of nnx::initializers");
  return fn(key, shape, dtype, Box::whole(shape));
}

Initializer with_partitioning(Initializer init, PartitionSpec spec) {
  init.metadata.out_sharding = std::move(spec);
  return init;
}

Initializer with_metadata(Initializer init, const Metadata& metadata) {
  init.metadata = init.metadata.merged_with(metadata);
  return init;
}

}  // namespace nnx
