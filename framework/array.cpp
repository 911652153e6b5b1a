// Array construction and dtype names.
#include <nnx/framework/array.h>
#include <nnx/framework/error.h>

#include <torch/torch.h>

namespace nnx {

Array::Array(at::Tensor full) : local_(std::move(full)) {
  if (local_.defined()) shape_ = local_.sizes().vec();
}

Array Array::abstract(const Shape& shape, at::ScalarType dtype) {
  return Array(torch::empty(shape, torch::TensorOptions().dtype(dtype).device(torch::kMeta)));
}

Array Array::with_local(at::Tensor local) const {
  Array out = *this;
  out.local_ = std::move(local);
  return out;
}

bool Array::is_abstract() const { return local_.defined() && local_.is_meta(); }

at::ScalarType Array::dtype() const {
  NNX_CHECK(local_.defined(), "the array is empty (a variable that was popped or never set)");
  return local_.scalar_type();
}

std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return c10::toString(dtype);
  }
}

}  // namespace nnx
