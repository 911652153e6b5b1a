#include <nnx/modules/detail/compute_dtype.h>

#include <nnx/core/error.h>

#include <c10/core/ScalarType.h>

namespace nnx::detail {

at::ScalarType compute_dtype(const std::optional<at::ScalarType>& dtype,
                             std::initializer_list<const Array*> operands) {
  if (dtype) return *dtype;
  std::optional<at::ScalarType> promoted;
  for (const Array* a : operands)
    if (a != nullptr && a->defined())
      promoted = promoted ? c10::promoteTypes(*promoted, a->dtype()) : a->dtype();
  NNX_CHECK(promoted.has_value(), "a layer was called without any defined operand");
  return *promoted;
}

}  // namespace nnx::detail
