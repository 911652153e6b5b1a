#include <nnx/sharding/detail/combine.h>

#include <nnx/core/error.h>

#include <fmt/format.h>

#include <type_traits>

namespace nnx::detail {

namespace {

// Integer sums computed unsigned, so that overflow is defined.
template <class T>
void combine_typed(T* acc, const T* in, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      if constexpr (std::is_integral_v<T>) {
        using U = std::make_unsigned_t<T>;
        for (int64_t i = 0; i < n; ++i)
          acc[i] = static_cast<T>(static_cast<U>(acc[i]) + static_cast<U>(in[i]));
      } else {
        for (int64_t i = 0; i < n; ++i) acc[i] += in[i];
      }
      return;
    case ReduceOp::max:
      for (int64_t i = 0; i < n; ++i)
        if (in[i] > acc[i] || in[i] != in[i]) acc[i] = in[i];
      return;
    case ReduceOp::min:
      for (int64_t i = 0; i < n; ++i)
        if (in[i] < acc[i] || in[i] != in[i]) acc[i] = in[i];
      return;
  }
}

}  // namespace

bool combinable(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: case at::kDouble: case at::kLong: case at::kInt: case at::kShort:
    case at::kChar: case at::kByte:
      return true;
    default:
      return false;
  }
}

void combine(void* acc, const void* in, int64_t n, at::ScalarType dtype, ReduceOp op,
             const char* who) {
  switch (dtype) {
#define NNX_COMBINE(scalar, type) \
  case scalar: \
    return combine_typed(static_cast<type*>(acc), static_cast<const type*>(in), n, op);
    NNX_COMBINE(at::kFloat, float)
    NNX_COMBINE(at::kDouble, double)
    NNX_COMBINE(at::kLong, int64_t)
    NNX_COMBINE(at::kInt, int32_t)
    NNX_COMBINE(at::kShort, int16_t)
    NNX_COMBINE(at::kChar, int8_t)
    NNX_COMBINE(at::kByte, uint8_t)
#undef NNX_COMBINE
    default:
      throw_error(who, fmt::format("no reduction for dtype {}", c10::toString(dtype)));
  }
}

}  // namespace nnx::detail
