// Source: a table of records (one row per example) that a DataLoader reads by index, as
// grain's RandomAccessDataSource. TensorSource holds its rows in memory.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace nnx::data {

class Source {
 public:
  virtual ~Source() = default;
  virtual int64_t size() const = 0;                       // number of records
  virtual std::vector<int64_t> record_shape() const = 0;  // shape of one record
  virtual at::ScalarType dtype() const = 0;
  // The records at `indices` (each in [0, size())), stacked: [indices.size(), record_shape...].
  virtual at::Tensor read(const std::vector<int64_t>& indices) const = 0;
  // Where the records come from (a file path), for error messages.
  virtual std::string name() const = 0;
};

// Records held in memory: rows of `rows` along dim 0.
class TensorSource : public Source {
 public:
  explicit TensorSource(at::Tensor rows, std::string name = "tensor");
  int64_t size() const override;
  std::vector<int64_t> record_shape() const override;
  at::ScalarType dtype() const override;
  at::Tensor read(const std::vector<int64_t>& indices) const override;
  std::string name() const override { return name_; }

 private:
  at::Tensor rows_;
  std::string name_;
};

// Records [begin, end) of `source`, as a source of their own (a subset, a validation split).
std::shared_ptr<const Source> slice(std::shared_ptr<const Source> source, int64_t begin,
                                    int64_t end);

namespace detail {
// Errors unless every index lies in [0, source.size()).
void check_indices(const Source& source, const std::vector<int64_t>& indices);
}  // namespace detail

}  // namespace nnx::data
