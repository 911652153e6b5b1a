// Initializer calls and the with_partitioning/with_metadata wrappers.
#include <nnx/core/error.h>
#include <nnx/framework/initializer.h>

#include <ATen/ATen.h>

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

namespace {

// Row-major flat indices, within dims [first, last) of `shape`, of the elements of `box`.
at::Tensor flat_indices(const Shape& shape, const Box& box, size_t first, size_t last) {
  at::Tensor index = at::zeros({1}, at::kLong);
  for (size_t d = first; d < last; ++d)
    index = (index.unsqueeze(1) * shape[d] + at::arange(box.start[d], box.start[d] + box.size[d]))
                .reshape({-1});
  return index;
}

}  // namespace

Initializer as_matrix(Initializer init, size_t in_dims) {
  NNX_CHECK(init.fn, "empty initializer: use one of nnx::initializers");
  auto inner = init.fn;
  init.fn = [inner, in_dims](const random::Key& key, const Shape& shape, at::ScalarType dtype,
                             const Box& block) {
    check_box_inside(block, shape, "as_matrix");
    NNX_CHECK(in_dims <= shape.size(), "in_dims {} exceeds the rank of shape {}", in_dims,
              to_string(shape));
    std::vector<std::pair<size_t, size_t>> groups{{0, in_dims}, {in_dims, shape.size()}};
    if (in_dims == 0) groups.erase(groups.begin());
    Shape flat;
    Box cover;
    std::vector<at::Tensor> picks;
    for (auto [first, last] : groups) {
      int64_t size = 1;
      for (size_t d = first; d < last; ++d) size *= shape[d];
      at::Tensor idx = flat_indices(shape, block, first, last);
      const int64_t lo = idx.numel() ? idx.min().item<int64_t>() : 0;
      const int64_t hi = idx.numel() ? idx.max().item<int64_t>() + 1 : 0;
      flat.push_back(size);
      cover.start.push_back(lo);
      cover.size.push_back(hi - lo);
      picks.push_back(idx - lo);
    }
    at::Tensor values = inner(key, flat, dtype, cover);
    for (size_t g = 0; g < picks.size(); ++g)
      values = values.index_select(static_cast<int64_t>(g), picks[g].to(values.device()));
    return values.reshape(block.size);
  };
  return init;
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
