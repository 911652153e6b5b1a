#include <nnx/sharding/detail/elementwise.h>

#include <nnx/core/error.h>

#include <torch/types.h>

#include <algorithm>
#include <cmath>

namespace nnx::detail {

void check_broadcast(const Array& a, const Array& b, const char* op) {
  const size_t n = std::max(a.shape().size(), b.shape().size());
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.shape().size() ? 1 : a.shape()[i - (n - a.shape().size())];
    int64_t db = i < n - b.shape().size() ? 1 : b.shape()[i - (n - b.shape().size())];
    if (da != db && da != 1 && db != 1)
      throw_error(op, fmt::format("shapes {} and {} do not broadcast (dim {}: {} vs {})",
                                  shape_str(a), shape_str(b), i, da, db));
  }
}

std::optional<at::ScalarType> zero_d_promotion(const Array& a, const Array& b) {
  if (!a.defined() || !b.defined() || (a.ndim() == 0) == (b.ndim() == 0)) return std::nullopt;
  const at::ScalarType type = at::promote_types(a.dtype(), b.dtype());
  if (at::result_type(a.local(), b.local()) == type) return std::nullopt;
  return type;
}

at::Scalar promoting_scalar(double value) {
  if (std::trunc(value) == value && std::abs(value) < 0x1p63)
    return at::Scalar(static_cast<int64_t>(value));
  return at::Scalar(value);
}

Array scalar_like(const Array& a, double value) {
  const at::ScalarType dtype = at::result_type(a.local(), promoting_scalar(value));
  return Array(torch::full({}, value, a.local().options().dtype(dtype).requires_grad(false)));
}

at::Tensor as_floating(const at::Tensor& x) {
  return at::isFloatingType(x.scalar_type()) ? x : x.to(c10::get_default_dtype_as_scalartype());
}

}  // namespace nnx::detail
