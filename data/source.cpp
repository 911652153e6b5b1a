// TensorSource and the index check every source shares.
#include <nnx/data/source.h>

#include <nnx/core/error.h>

#include <ATen/ATen.h>

namespace nnx::data {

TensorSource::TensorSource(at::Tensor rows, std::string name)
    : rows_(std::move(rows)), name_(std::move(name)) {
  NNX_CHECK(rows_.defined() && rows_.dim() >= 1,
            "{}: records need a tensor with a leading record dim, got {} dims", name_,
            rows_.defined() ? rows_.dim() : 0);
}

int64_t TensorSource::size() const { return rows_.size(0); }

std::vector<int64_t> TensorSource::record_shape() const { return rows_.sizes().slice(1).vec(); }

at::ScalarType TensorSource::dtype() const { return rows_.scalar_type(); }

at::Tensor TensorSource::read(const std::vector<int64_t>& indices) const {
  detail::check_indices(*this, indices);
  auto index = at::tensor(indices, at::kLong);
  return rows_.index_select(0, index);
}

namespace detail {
void check_indices(const Source& source, const std::vector<int64_t>& indices) {
  for (int64_t i : indices)
    NNX_CHECK(i >= 0 && i < source.size(), "{}: record {} is out of range [0, {})", source.name(),
              i, source.size());
}
}  // namespace detail

}  // namespace nnx::data
