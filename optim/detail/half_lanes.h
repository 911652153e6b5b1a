// Eight float16 values at a time for the fused pass (x86-64 with AVX2 and F16C): Halves8 as
// stored, Floats8 widened to float. Each operation computes in float and rounds to float16 with
// the CPU's own conversion (to nearest, ties to even), as LibTorch's float16 tensor ops round.
// Everything here is built for AVX2 and F16C: callers check cpu_has_f16c() first, and inline it
// into a function built for them (fused_stage.cpp's run_for_f16c).
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#define NNX_HALF_LANES 1

#include <immintrin.h>

#include <cstdint>

namespace nnx::optim::detail {

#define NNX_F16C_INLINE __attribute__((target("avx2,f16c"))) inline

inline bool cpu_has_f16c() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return yes;
}

// may_alias: blocks of float16 and float arrays are read and written through these types.
struct __attribute__((may_alias)) Halves8 {
  uint16_t bits[8];
};

struct __attribute__((may_alias)) Floats8 {
  __m256 v;
  Floats8() = default;
  NNX_F16C_INLINE Floats8(__m256 x) : v(x) {}
  NNX_F16C_INLINE explicit Floats8(double x) : v(_mm256_set1_ps(static_cast<float>(x))) {}
  NNX_F16C_INLINE explicit Floats8(const Halves8& h)
      : v(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h.bits)))) {}
};

// x rounded to float16, as stored.
NNX_F16C_INLINE Halves8 to_halves(Floats8 x) {
  Halves8 h;
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h.bits),
                   _mm256_cvtps_ph(x.v, _MM_FROUND_TO_NEAREST_INT));
  return h;
}
// x rounded to float16 and widened back.
NNX_F16C_INLINE Floats8 round_to_float16(Floats8 x) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(x.v, _MM_FROUND_TO_NEAREST_INT));
}

NNX_F16C_INLINE Floats8 operator+(Floats8 a, Floats8 b) { return _mm256_add_ps(a.v, b.v); }
NNX_F16C_INLINE Floats8 operator-(Floats8 a, Floats8 b) { return _mm256_sub_ps(a.v, b.v); }
NNX_F16C_INLINE Floats8 operator*(Floats8 a, Floats8 b) { return _mm256_mul_ps(a.v, b.v); }
NNX_F16C_INLINE Floats8 operator/(Floats8 a, Floats8 b) { return _mm256_div_ps(a.v, b.v); }
NNX_F16C_INLINE Floats8 sqrt_of(Floats8 x) { return _mm256_sqrt_ps(x.v); }
// 1 where x > 0, -1 where x < 0, else 0 (zeros and NaNs).
NNX_F16C_INLINE Floats8 sign_of(Floats8 x) {
  const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
  return _mm256_sub_ps(_mm256_and_ps(_mm256_cmp_ps(x.v, zero, _CMP_GT_OQ), one),
                       _mm256_and_ps(_mm256_cmp_ps(x.v, zero, _CMP_LT_OQ), one));
}

#undef NNX_F16C_INLINE

}  // namespace nnx::optim::detail

#endif
