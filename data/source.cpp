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

namespace {
class SliceSource : public Source {
 public:
  SliceSource(std::shared_ptr<const Source> source, int64_t begin, int64_t end)
      : source_(std::move(source)), begin_(begin), end_(end) {}
  int64_t size() const override { return end_ - begin_; }
  std::vector<int64_t> record_shape() const override { return source_->record_shape(); }
  at::ScalarType dtype() const override { return source_->dtype(); }
  at::Tensor read(const std::vector<int64_t>& indices) const override {
    detail::check_indices(*this, indices);
    std::vector<int64_t> shifted(indices);
    for (auto& i : shifted) i += begin_;
    return source_->read(shifted);
  }
  std::string name() const override {
    return fmt::format("{}[{}:{}]", source_->name(), begin_, end_);
  }

 private:
  std::shared_ptr<const Source> source_;
  int64_t begin_, end_;
};
}  // namespace

std::shared_ptr<const Source> slice(std::shared_ptr<const Source> source, int64_t begin,
                                    int64_t end) {
  NNX_CHECK(source != nullptr, "slice of a null source");
  NNX_CHECK(0 <= begin && begin <= end && end <= source->size(),
            "{}: the slice [{}, {}) does not fit its {} records", source->name(), begin, end,
            source->size());
  return std::make_shared<SliceSource>(std::move(source), begin, end);
}

namespace detail {
void check_indices(const Source& source, const std::vector<int64_t>& indices) {
  for (int64_t i : indices)
    NNX_CHECK(i >= 0 && i < source.size(), "{}: record {} is out of range [0, {})", source.name(),
              i, source.size());
}
}  // namespace detail

}  // namespace nnx::data
