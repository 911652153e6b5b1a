// Threefry keys and the block-wise samplers: each element's value depends only on the key and
// its global linear index, so a block is computed without the rest of the array.
#include <nnx/core/error.h>
#include <nnx/core/random.h>
#include <nnx/core/detail/random_tensor.h>
#include <nnx/core/detail/xla_f32_constants.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace nnx::random {

namespace {

constexpr uint32_t rotl(uint32_t v, int r) { return (v << r) | (v >> (32 - r)); }

// Four threefry rounds with the given rotation amounts.
inline void four_rounds(uint32_t& x0, uint32_t& x1, const int (&r)[4]) {
  for (int i = 0; i < 4; ++i) {
    x0 += x1;
    x1 = rotl(x1, r[i]);
    x1 ^= x0;
  }
}

}  // namespace

std::array<uint32_t, 2> threefry2x32(std::array<uint32_t, 2> key,
                                     std::array<uint32_t, 2> counter) {
  static constexpr int kRotA[4] = {13, 15, 26, 6};
  static constexpr int kRotB[4] = {17, 29, 16, 24};
  const uint32_t ks[3] = {key[0], key[1], key[0] ^ key[1] ^ 0x1BD11BDAu};
  uint32_t x0 = counter[0] + ks[0];
  uint32_t x1 = counter[1] + ks[1];
  // Five groups of four rounds; after group g, inject key words (g+1)%3, (g+2)%3 and g+1.
  for (uint32_t g = 0; g < 5; ++g) {
    four_rounds(x0, x1, g % 2 == 0 ? kRotA : kRotB);
    x0 += ks[(g + 1) % 3];
    x1 += ks[(g + 2) % 3] + (g + 1);
  }
  return {x0, x1};
}

std::string to_string(const Key& key) {
  return fmt::format("Key({}, {})", key.words[0], key.words[1]);
}

Key key(int64_t seed) {
  return Key{{0u, static_cast<uint32_t>(static_cast<uint64_t>(seed) & 0xffffffffu)}};
}

Key fold_in(const Key& key, uint32_t data) { return Key{threefry2x32(key.words, {0u, data})}; }

std::vector<Key> split(const Key& key, int64_t n) {
  NNX_CHECK(n >= 0, "cannot split {} into {} keys; n must be >= 0", to_string(key), n);
  std::vector<Key> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const auto u = static_cast<uint64_t>(i);
    out[i] = Key{threefry2x32(key.words, {static_cast<uint32_t>(u >> 32),
                                          static_cast<uint32_t>(u)})};
  }
  return out;
}

std::array<uint32_t, 2> key_data(const Key& key) { return key.words; }
Key wrap_key_data(std::array<uint32_t, 2> data) { return Key{data}; }

uint32_t bits32_at(const Key& key, uint64_t index) {
  const auto o = threefry2x32(key.words, {static_cast<uint32_t>(index >> 32),
                                          static_cast<uint32_t>(index)});
  return o[0] ^ o[1];
}

uint64_t bits64_at(const Key& key, uint64_t index) {
  const auto o = threefry2x32(key.words, {static_cast<uint32_t>(index >> 32),
                                          static_cast<uint32_t>(index)});
  return (static_cast<uint64_t>(o[0]) << 32) | o[1];
}

namespace {

// The block to produce: `block` validated against `shape`, or the whole array.
Box resolve_block(const Shape& shape, const std::optional<Box>& block, const char* who) {
  for (auto d : shape)
    if (d < 0)
      detail::throw_error(who, fmt::format("shape {} has a negative dimension; dims must be >= 0",
                                           nnx::to_string(shape)));
  if (!block) return Box::whole(shape);
  check_box_inside(*block, shape, who);
  return *block;
}

// Calls f(offset in block, global row-major linear index) for every element of `box`; the
// block's rows (last dim) are spread over threads.
template <class F>
void for_each_element(const Shape& shape, const Box& box, F&& f) {
  const auto rank = static_cast<int64_t>(shape.size());
  const int64_t total = box.numel();
  if (total == 0) return;
  const int64_t row_len = rank == 0 ? 1 : box.size[rank - 1];
  const int64_t rows = total / row_len;
  std::vector<uint64_t> stride(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d) stride[d] = stride[d + 1] * shape[d + 1];
  const int64_t grain = std::max<int64_t>(1, 2048 / row_len);
  at::parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      uint64_t base = rank == 0 ? 0 : static_cast<uint64_t>(box.start[rank - 1]);
      int64_t rest = r;
      for (int64_t d = rank - 2; d >= 0; --d) {
        base += static_cast<uint64_t>(box.start[d] + rest % box.size[d]) * stride[d];
        rest /= box.size[d];
      }
      for (int64_t j = 0; j < row_len; ++j) f(r * row_len + j, base + j);
    }
  });
}

at::Tensor empty_block(const Box& box, at::ScalarType dtype) {
  return at::empty(box.size, at::TensorOptions().dtype(dtype));
}

// The float32 in [1, 2) whose mantissa is the top 23 of the bits, minus 1: JAX's [0, 1).
inline float unit_float(uint32_t bits) {
  const uint32_t pattern = (bits >> 9) | 0x3F800000u;
  float f;
  std::memcpy(&f, &pattern, sizeof f);
  return f - 1.0f;
}

// JAX's uniform on [lo, hi) in float32: max(lo, u * (hi - lo) + lo), the multiply-add fused
// as XLA's CPU backend fuses it (unfused, about one value in five is off by an ulp).
inline float uniform_at(const Key& key, uint64_t index, float lo, float span) {
  return std::max(lo, std::fma(unit_float(bits32_at(key, index)), span, lo));
}

// Fills a float32 block with f(global index); casts to `dtype` at the end.
template <class F>
at::Tensor sample_block(const Shape& shape, const Box& box, at::ScalarType dtype, F&& f) {
  at::Tensor out = empty_block(box, at::kFloat);
  float* data = out.data_ptr<float>();
  for_each_element(shape, box, [&](int64_t offset, uint64_t index) { data[offset] = f(index); });
  return dtype == at::kFloat ? out : out.to(dtype);
}

const float kSqrt2 = static_cast<float>(std::sqrt(2.0));

// Raw bits of each element of the block as int64, from bits_at(key, global index).
template <class BitsAt>
at::Tensor raw_bits(const Key& key, const Shape& shape, const std::optional<Box>& block,
                    const char* who, BitsAt bits_at) {
  const Box box = resolve_block(shape, block, who);
  at::Tensor out = empty_block(box, at::kLong);
  int64_t* data = out.data_ptr<int64_t>();
  for_each_element(shape, box, [&](int64_t offset, uint64_t index) {
    data[offset] = static_cast<int64_t>(bits_at(key, index));
  });
  return out;
}

namespace ops = nnx::detail::random_ops;

// The float32 uniforms max(lo, u * span + lo) of `box`, computed on `device` with tensor ops.
at::Tensor uniform_on(at::Device device, const Key& key, const Shape& shape, const Box& box,
                      float lo, float span) {
  return ops::uniform_from_units(ops::unit_float(ops::bits32_block(key, shape, box, device)), lo,
                                 span);
}

at::Tensor cast(const at::Tensor& samples, at::ScalarType dtype) {
  return dtype == at::kFloat ? samples : samples.to(dtype);
}

thread_local std::optional<at::Device> current_sampling_device;

constexpr int64_t kSlabElements = int64_t{1} << 21;

// Fills `out` (the values of `box`) slab by slab along `dim`, the dims before it of size 1 here;
// a single index of `dim` still too large is split along the next dim.
template <class Sample>
void fill_slabs(const at::Tensor& out, const Box& box, size_t dim, Sample& sample) {
  if (box.numel() <= kSlabElements || dim >= box.size.size()) {
    out.copy_(sample(box));
    return;
  }
  int64_t inner = 1;
  for (size_t d = dim + 1; d < box.size.size(); ++d) inner *= box.size[d];
  const int64_t step = std::max<int64_t>(1, kSlabElements / inner);
  const auto along = static_cast<int64_t>(dim);
  for (int64_t r = 0; r < box.size[dim]; r += step) {
    Box slab = box;
    slab.start[dim] += r;
    slab.size[dim] = std::min(step, box.size[dim] - r);
    fill_slabs(out.narrow(along, r, slab.size[dim]), slab, dim + 1, sample);
  }
}

// A device block sampled a slab at a time, so that the tensor path's temporaries (a few int64
// and float64 tensors per element) stay near 2^21 elements, whatever the block's shape.
template <class Sample>
at::Tensor in_slabs(const Box& box, at::ScalarType dtype, at::Device device, Sample&& sample) {
  if (box.numel() <= kSlabElements) return sample(box);
  at::Tensor out = at::empty(box.size, at::TensorOptions().dtype(dtype).device(device));
  fill_slabs(out, box, 0, sample);
  return out;
}


// Raw bits on `device` (tensor ops, slab by slab) or on the host (bits_at per element).
template <class DeviceBits, class BitsAt>
at::Tensor bits_on(const Key& key, const Shape& shape, const std::optional<Box>& block,
                   std::optional<at::Device> device, const char* who, DeviceBits device_bits,
                   BitsAt bits_at) {
  if (!device) return raw_bits(key, shape, block, who, bits_at);
  return in_slabs(resolve_block(shape, block, who), at::kLong, *device,
                  [&](const Box& slab) { return device_bits(key, shape, slab, *device); });
}

}  // namespace

at::Tensor bits(const Key& key, const Shape& shape, const std::optional<Box>& block,
                std::optional<at::Device> device) {
  return bits_on(key, shape, block, device, "bits", ops::bits32_block, bits32_at);
}

at::Tensor bits64(const Key& key, const Shape& shape, const std::optional<Box>& block,
                  std::optional<at::Device> device) {
  return bits_on(key, shape, block, device, "bits64", ops::bits64_block, bits64_at);
}

at::Tensor uniform(const Key& key, const Shape& shape, double minval, double maxval,
                   const Sample& options) {
  detail::check_floating(options.dtype, "uniform");
  const Box box = resolve_block(shape, options.block, "uniform");
  const float lo = static_cast<float>(minval);
  const float span = static_cast<float>(maxval) - lo;
  if (options.device)
    return in_slabs(box, options.dtype, *options.device, [&](const Box& slab) {
      return cast(uniform_on(*options.device, key, shape, slab, lo, span), options.dtype);
    });
  return sample_block(shape, box, options.dtype,
                      [&](uint64_t i) { return uniform_at(key, i, lo, span); });
}

at::Tensor normal(const Key& key, const Shape& shape, const Sample& options) {
  detail::check_floating(options.dtype, "normal");
  const Box box = resolve_block(shape, options.block, "normal");
  const float lo = std::nextafter(-1.0f, 0.0f);
  const float span = 1.0f - lo;
  if (options.device)
    return in_slabs(box, options.dtype, *options.device, [&](const Box& slab) {
      at::Tensor u = uniform_on(*options.device, key, shape, slab, lo, span);
      return cast(ops::erf_inv_f32(u).mul_(kSqrt2), options.dtype);
    });
  return sample_block(shape, box, options.dtype, [&](uint64_t i) {
    return kSqrt2 * detail::erf_inv_f32(uniform_at(key, i, lo, span));
  });
}

at::Tensor truncated_normal(const Key& key, double lower, double upper, const Shape& shape,
                            const Sample& options) {
  detail::check_floating(options.dtype, "truncated_normal");
  NNX_CHECK(lower < upper, "lower {} must be below upper {}", lower, upper);
  const Box box = resolve_block(shape, options.block, "truncated_normal");
  const float lo_f = static_cast<float>(lower), hi_f = static_cast<float>(upper);
  const float a = detail::erf_f32(lo_f / kSqrt2);
  const float b = detail::erf_f32(hi_f / kSqrt2);
  const float span = b - a;
  // Clip into the open interval: rounding may land on (or past) a bound.
  const float clip_lo = std::nextafter(lo_f, std::numeric_limits<float>::infinity());
  const float clip_hi = std::nextafter(hi_f, -std::numeric_limits<float>::infinity());
  if (options.device)
    return in_slabs(box, options.dtype, *options.device, [&](const Box& slab) {
      at::Tensor u = uniform_on(*options.device, key, shape, slab, a, span);
      return cast(ops::erf_inv_f32(u).mul_(kSqrt2).clamp_(clip_lo, clip_hi), options.dtype);
    });
  return sample_block(shape, box, options.dtype, [&](uint64_t i) {
    const float v = kSqrt2 * detail::erf_inv_f32(uniform_at(key, i, a, span));
    return std::min(std::max(v, clip_lo), clip_hi);
  });
}

at::Tensor bernoulli(const Key& key, double p, const Shape& shape,
                     const std::optional<Box>& block, std::optional<at::Device> device) {
  NNX_CHECK(p >= 0 && p <= 1, "p = {} is not a probability; pass p in [0, 1]", p);
  const Box box = resolve_block(shape, block, "bernoulli");
  const float p_f = static_cast<float>(p);
  if (device)
    return in_slabs(box, at::kBool, *device, [&](const Box& slab) {
      return ops::unit_float(ops::bits32_block(key, shape, slab, *device)).lt(p_f);
    });
  at::Tensor out = empty_block(box, at::kBool);
  bool* data = out.data_ptr<bool>();
  for_each_element(shape, box, [&](int64_t offset, uint64_t index) {
    data[offset] = unit_float(bits32_at(key, index)) < p_f;
  });
  return out;
}

std::optional<at::Device> sampling_device() { return current_sampling_device; }

SamplingDeviceScope::SamplingDeviceScope(std::optional<at::Device> device)
    : previous_(current_sampling_device) {
  current_sampling_device = device;
}

SamplingDeviceScope::~SamplingDeviceScope() { current_sampling_device = previous_; }

}  // namespace nnx::random

namespace nnx::detail {

float erf_f32(float x) {
  // Past this |x|, erf rounds to +-1 in float32.
  constexpr float kSaturate = 3.832506856900711f;
  if (std::fabs(x) >= kSaturate) return std::copysign(1.0f, x);
  // erf(x) ~ x * P(x^2) / Q(x^2), Horner with fused multiply-adds, highest power first.
  static constexpr float kP[5] = {0.00022905065861350646f, 0.0034082910107109506f,
                                  0.050955695062380861f, 0.18520832239976145f,
                                  1.128379143519084f};
  static constexpr float kQ[7] = {-1.1791602954361697e-7f, 0.000023547966471313185f,
                                  0.0010179625278914885f,  0.014070470171167667f,
                                  0.11098505178285362f,    0.49746925110067538f,
                                  1.0f};
  const float x2 = x * x;
  float p = kP[0];
  for (int i = 1; i < 5; ++i) p = std::fma(x2, p, kP[i]);
  float q = kQ[0];
  for (int i = 1; i < 7; ++i) q = std::fma(x2, q, kQ[i]);
  return (x * p) / q;
}

float log_f32(float x) {
  using namespace xla_f32;
  if (std::isnan(x) || x < 0) return std::numeric_limits<float>::quiet_NaN();
  if (x == 0) return -std::numeric_limits<float>::infinity();
  if (std::isinf(x)) return x;
  // x = m * 2^e with m in [sqrt(1/2), sqrt(2)); log(x) = log1p(m - 1) + e * ln 2, the log1p by
  // a degree-8 polynomial in three interleaved parts, ln 2 split in two (hi exact).
  const float* p = kLogPoly;
  int exponent = 0;
  float m = std::frexp(std::max(x, std::numeric_limits<float>::min()), &exponent);  // [0.5, 1)
  float e = static_cast<float>(exponent);
  const bool low = m < kSqrtHalf;
  float r = m - 1.0f;
  if (low) {
    e -= 1.0f;
    r += m;
  }
  const float r2 = r * r, r3 = r2 * r;
  float y0 = std::fma(p[0], r, p[1]), y1 = std::fma(p[3], r, p[4]);
  float y2 = std::fma(p[6], r, p[7]);
  y0 = std::fma(y0, r, p[2]);
  y1 = std::fma(y1, r, p[5]);
  y2 = std::fma(y2, r, p[8]);
  float y = std::fma(std::fma(y0, r3, y1), r3, y2);
  y = std::fma(y, r3, e * kLn2Lo);  // XLA fuses this product into the sum
  return ((r - r2 * 0.5f) + y) + e * kLn2Hi;
}

float log1p_f32(float x) {
  using namespace xla_f32;
  // Near 0 (|x| < sqrt(2) - 1): x - x^2/2 + x^3 P(x)/Q(x), Horner with fused multiply-adds;
  // elsewhere log(1 + x).
  if (!(std::fabs(x) < kLog1pNear)) return log_f32(1.0f + x);
  float num = kLog1pNum[0], den = kLog1pDen[0];
  for (int i = 1; i < 7; ++i) {
    num = std::fma(num, x, kLog1pNum[i]);
    den = std::fma(den, x, kLog1pDen[i]);
  }
  const float x2 = x * x;
  return x + (-0.5f * x2 + (x * x2) * (num / den));
}

float erf_inv_f32(float x) {
  using namespace xla_f32;
  // Giles, "Approximating the erfinv function": a polynomial in w - 2.5 where
  // w = -log(1 - x^2) < 5, else in sqrt(w) - 3.
  if (std::fabs(x) == 1.0f) return x * std::numeric_limits<float>::infinity();
  const float w = -log1p_f32(-x * x);  // XLA's log1p, not libm's: they differ in the last bit
  const bool central = w < 5.0f;
  const float t = central ? w - 2.5f : std::sqrt(w) - 3.0f;
  const float* c = central ? kErfInvCentral : kErfInvTail;
  float p = c[0];
  for (int i = 1; i < 9; ++i) p = std::fma(p, t, c[i]);  // fused, as XLA
  return p * x;
}

void check_floating(at::ScalarType dtype, const char* who) {
  if (!at::isFloatingType(dtype))
    throw_error(who, fmt::format("dtype {} is not a floating type; pass at::kFloat (bitwise "
                                 "JAX), at::kDouble, at::kHalf or at::kBFloat16",
                                 c10::toString(dtype)));
}

}  // namespace nnx::detail
