// Eight float16 values at a time for the fused pass: Halves8 as stored, Floats8 widened to float,
// each operation rounded to float16 by the CPU's F16C conversions, as LibTorch's float16 ops round.
// Built for AVX2 and F16C: callers check cpu_has_avx2_f16c() and inline it (run_for_f16c).
#pragma once

// Optimized GCC builds only: the lanes pass through generic-target templates that must be inlined
// into run_for_f16c (`flatten`), which GCC does not do at -O0 or with -fno-inline, nor Clang.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__) && \
    !defined(__NO_INLINE__)
#define NNX_HALF_LANES 1

#include <immintrin.h>

#include <cstdint>

namespace nnx::optim::detail {

inline bool cpu_has_avx2_f16c() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return yes;
}

#pragma GCC push_options
#pragma GCC target("avx2,f16c")

// may_alias: blocks of float16 and float arrays are read and written through these types.
struct __attribute__((may_alias)) Halves8 {
  uint16_t bits[8];
};

struct __attribute__((may_alias)) Floats8 {
  __m256 v;
  Floats8() = default;
  Floats8(__m256 x) : v(x) {}
  explicit Floats8(double x) : v(_mm256_set1_ps(static_cast<float>(x))) {}
  explicit Floats8(const Halves8& h)
      : v(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h.bits)))) {}
};

// x rounded to float16, as stored.
inline Halves8 to_halves(Floats8 x) {
  Halves8 h;
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h.bits),
                   _mm256_cvtps_ph(x.v, _MM_FROUND_TO_NEAREST_INT));
  return h;
}
// x rounded to float16 and widened back.
inline Floats8 round_to_float16(Floats8 x) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(x.v, _MM_FROUND_TO_NEAREST_INT));
}

inline Floats8 operator+(Floats8 a, Floats8 b) { return _mm256_add_ps(a.v, b.v); }
inline Floats8 operator-(Floats8 a, Floats8 b) { return _mm256_sub_ps(a.v, b.v); }
inline Floats8 operator*(Floats8 a, Floats8 b) { return _mm256_mul_ps(a.v, b.v); }
inline Floats8 operator/(Floats8 a, Floats8 b) { return _mm256_div_ps(a.v, b.v); }
inline Floats8 sqrt_of(Floats8 x) { return _mm256_sqrt_ps(x.v); }
// 1 where x > 0, -1 where x < 0, else 0 (zeros and NaNs).
inline Floats8 sign_of(Floats8 x) {
  const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
  return _mm256_sub_ps(_mm256_and_ps(_mm256_cmp_ps(x.v, zero, _CMP_GT_OQ), one),
                       _mm256_and_ps(_mm256_cmp_ps(x.v, zero, _CMP_LT_OQ), one));
}

#pragma GCC pop_options

}  // namespace nnx::optim::detail

#endif
