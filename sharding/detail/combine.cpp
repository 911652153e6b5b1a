#include <nnx/sharding/detail/combine.h>

#include <nnx/core/error.h>

#include <fmt/format.h>

#include <type_traits>

namespace nnx::detail {

namespace {

// out[i] = f(a[i], b[i]). The three shapes of aliasing get loops of their own, each free of
// overlap, so that every one vectorizes without a runtime overlap check falling back to scalar.
template <class T, class F>
void each(T* out, const T* a, const T* b, int64_t n, F f) {
  if (out == a) {
    T* __restrict acc = out;
    const T* __restrict in = b;
    for (int64_t i = 0; i < n; ++i) acc[i] = f(acc[i], in[i]);
  } else if (out == b) {
    T* __restrict acc = out;
    const T* __restrict in = a;
    for (int64_t i = 0; i < n; ++i) acc[i] = f(in[i], acc[i]);
  } else {
    T* __restrict to = out;
    const T* __restrict x = a;
    const T* __restrict y = b;
    for (int64_t i = 0; i < n; ++i) to[i] = f(x[i], y[i]);
  }
}

// Integer sums computed unsigned, so that overflow is defined. Max and min store every element,
// chosen by a select: the loops then vectorize, as a store under a branch does not.
template <class T>
void combine_typed(T* out, const T* a, const T* b, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      if constexpr (std::is_integral_v<T>) {
        using U = std::make_unsigned_t<T>;
        each(out, a, b, n,
             [](T x, T y) { return static_cast<T>(static_cast<U>(x) + static_cast<U>(y)); });
      } else {
        each(out, a, b, n, [](T x, T y) { return x + y; });
      }
      return;
    case ReduceOp::max:
      each(out, a, b, n, [](T x, T y) { return (y > x || y != y) ? y : x; });
      return;
    case ReduceOp::min:
      each(out, a, b, n, [](T x, T y) { return (y < x || y != y) ? y : x; });
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

void combine_into(void* out, const void* a, const void* b, int64_t n, at::ScalarType dtype,
                  ReduceOp op, const char* who) {
  switch (dtype) {
#define NNX_COMBINE(scalar, type)                                                        \
  case scalar:                                                                           \
    return combine_typed(static_cast<type*>(out), static_cast<const type*>(a),           \
                         static_cast<const type*>(b), n, op);
    NNX_COMBINABLE(NNX_COMBINE)
#undef NNX_COMBINE
    default:
      check_combinable(dtype, who);
  }
}
#undef NNX_COMBINABLE

}  // namespace nnx::detail
