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
    // Every element is stored, chosen by a select: the loops then vectorize, as a store under
    // a branch does not.
    case ReduceOp::max:
      for (int64_t i = 0; i < n; ++i)
        acc[i] = (in[i] > acc[i] || in[i] != in[i]) ? in[i] : acc[i];
      return;
    case ReduceOp::min:
      for (int64_t i = 0; i < n; ++i)
        acc[i] = (in[i] < acc[i] || in[i] != in[i]) ? in[i] : acc[i];
      return;
  }
}

}  // namespace

// The dtypes combine() has a loop for, with their C++ types.
#define NNX_COMBINABLE(X) \
  X(at::kFloat, float)    \
  X(at::kDouble, double)  \
  X(at::kLong, int64_t)   \
  X(at::kInt, int32_t)    \
  X(at::kShort, int16_t)  \
  X(at::kChar, int8_t)    \
  X(at::kByte, uint8_t)

bool combinable(at::ScalarType dtype) {
  switch (dtype) {
#define NNX_LISTED(scalar, type) case scalar:
    NNX_COMBINABLE(NNX_LISTED)
#undef NNX_LISTED
    return true;
    default:
      return false;
  }
}

void check_combinable(at::ScalarType dtype, const char* who) {
  if (!combinable(dtype))
    throw_error(who, fmt::format("no reduction for dtype {}", c10::toString(dtype)));
}

void combine(void* acc, const void* in, int64_t n, at::ScalarType dtype, ReduceOp op,
             const char* who) {
  switch (dtype) {
#define NNX_COMBINE(scalar, type) \
  case scalar:                    \
    return combine_typed(static_cast<type*>(acc), static_cast<const type*>(in), n, op);
    NNX_COMBINABLE(NNX_COMBINE)
#undef NNX_COMBINE
    default:
      check_combinable(dtype, who);
  }
}
#undef NNX_COMBINABLE

}  // namespace nnx::detail
