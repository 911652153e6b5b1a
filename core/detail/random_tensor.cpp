// Block samplers as tensor ops (see random_tensor.h). Only plain one-operation kernels are
// used (no alpha or addcmul forms), so no backend can fuse a multiply into an add unasked.
#include <nnx/core/detail/random_tensor.h>
#include <nnx/core/detail/xla_f32_constants.h>

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

namespace nnx::detail::random_ops {

using namespace xla_f32;

namespace {

constexpr int64_t kLow32 = 0xffffffffLL;
constexpr int64_t kTwo32 = 0x100000000LL;

at::Tensor wrap32(at::Tensor v) { return v.bitwise_and_(kLow32); }

at::Tensor rotl32(const at::Tensor& v, int r) {
  return wrap32(v.bitwise_left_shift(r)).bitwise_or_(v.bitwise_right_shift(32 - r));
}

// Row-major linear index of every element of `box` in the array of `shape`.
at::Tensor linear_index(const Shape& shape, const Box& box, at::Device device) {
  const auto options = at::TensorOptions().dtype(at::kLong).device(device);
  const auto rank = static_cast<int64_t>(shape.size());
  at::Tensor index = at::zeros(box.size, options);
  int64_t stride = 1;
  for (int64_t d = rank - 1; d >= 0; --d) {
    std::vector<int64_t> along(static_cast<size_t>(rank), 1);
    along[d] = box.size[d];
    at::Tensor coordinate = at::arange(box.start[d], box.start[d] + box.size[d], options);
    index.add_(coordinate.mul_(stride).view(along));
    stride *= shape[d];
  }
  return index;
}

at::Tensor scalar_on(double value, const at::Tensor& like) {
  return at::scalar_tensor(value, at::TensorOptions().dtype(at::kDouble).device(like.device()));
}

// fma over float64 operands that hold float32 values (see fma_f32).
at::Tensor fma_from_doubles(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
  const at::Tensor product = a * b;  // exact: 24 + 24 bits
  at::Tensor sum = product + c;
  // Knuth's two-sum: sum + error == product + c exactly.
  const at::Tensor b_virtual = sum - product;
  const at::Tensor error = (product - (sum - b_virtual)) + (c - b_virtual);
  // Round to odd: an inexact sum with an even last bit moves one ulp toward the exact value.
  const at::Tensor even = sum.view(at::kLong).bitwise_and(1).eq(0);
  const at::Tensor inexact = error.ne(0);
  const double inf = std::numeric_limits<double>::infinity();
  const at::Tensor toward = at::where(error.gt(0), scalar_on(inf, sum), scalar_on(-inf, sum));
  sum = at::where(inexact.logical_and(even), at::nextafter(sum, toward), sum);
  return sum.to(at::kFloat);
}

at::Tensor as_double(const at::Tensor& t) { return t.to(at::kDouble); }

// fma with a float32 tensor multiplicand and float32 constants.
at::Tensor fma_scalars(const at::Tensor& a, float b, float c) {
  return fma_from_doubles(as_double(a), scalar_on(b, a), scalar_on(c, a));
}

at::Tensor full_float(float value, const at::Tensor& like) {
  return at::full_like(like, value, at::TensorOptions().dtype(at::kFloat));
}

}  // namespace

at::Tensor sqrt_f32(const at::Tensor& x) {
  const at::Tensor exact = as_double(x);
  at::Tensor root = exact.sqrt().to(at::kFloat);  // within an ulp of the rounded root
  const float inf = std::numeric_limits<float>::infinity();
  const at::Tensor up = at::nextafter(root, full_float(inf, root));
  const at::Tensor down = at::nextafter(root, full_float(-inf, root));
  // The midpoints to the neighbours and their squares are exact in float64.
  const at::Tensor above = (as_double(root) + as_double(up)) * 0.5;
  const at::Tensor below = (as_double(root) + as_double(down)) * 0.5;
  root = at::where((above * above).lt(exact), up, root);
  return at::where((below * below).gt(exact).logical_and(root.gt(0)), down, root);
}

std::array<at::Tensor, 2> threefry_block(const random::Key& key, const Shape& shape, const Box& box,
                                         at::Device device) {
  static constexpr int kRotA[4] = {13, 15, 26, 6};
  static constexpr int kRotB[4] = {17, 29, 16, 24};
  const int64_t ks[3] = {key.words[0], key.words[1],
                         static_cast<int64_t>(key.words[0] ^ key.words[1] ^ 0x1BD11BDAu)};
  const at::Tensor index = linear_index(shape, box, device);
  at::Tensor x0 = wrap32(index.bitwise_right_shift(32).add_(ks[0]));
  at::Tensor x1 = wrap32(index.bitwise_and(kLow32).add_(ks[1]));
  for (int g = 0; g < 5; ++g) {
    const int* rotations = g % 2 == 0 ? kRotA : kRotB;
    for (int i = 0; i < 4; ++i) {
      x0 = wrap32(x0.add_(x1));
      x1 = rotl32(x1, rotations[i]).bitwise_xor_(x0);
    }
    x0 = wrap32(x0.add_(ks[(g + 1) % 3]));
    x1 = wrap32(x1.add_(ks[(g + 2) % 3] + g + 1));
  }
  return {x0, x1};
}

at::Tensor bits32_block(const random::Key& key, const Shape& shape, const Box& box,
                        at::Device device) {
  auto [o0, o1] = threefry_block(key, shape, box, device);
  return o0.bitwise_xor_(o1);
}

at::Tensor bits64_block(const random::Key& key, const Shape& shape, const Box& box,
                        at::Device device) {
  auto [o0, o1] = threefry_block(key, shape, box, device);
  // o0 as a signed 32-bit value times 2^32 is the high word in two's complement, no overflow.
  at::Tensor high = o0.sub(o0.ge(kTwo32 / 2).to(at::kLong).mul_(kTwo32));
  return high.mul_(kTwo32).add_(o1);
}

at::Tensor unit_float(const at::Tensor& bits32) {
  at::Tensor pattern =
      bits32.bitwise_right_shift(9).bitwise_or_(int64_t{0x3F800000}).to(at::kInt);
  return pattern.view(at::kFloat) - 1.0;
}

at::Tensor fma_f32(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
  return fma_from_doubles(as_double(a), as_double(b), as_double(c));
}

at::Tensor uniform_from_units(const at::Tensor& units, float lo, float span) {
  // std::max(lo, v) exactly: lo unless lo < v (so -0 stays -0, and NaN gives lo).
  const at::Tensor v = fma_scalars(units, span, lo);
  return at::where(v.gt(lo), v, full_float(lo, v));
}

at::Tensor log_f32(const at::Tensor& x) {
  const float* p = kLogPoly;
  auto [m, exponent] = at::frexp(x.clamp_min(std::numeric_limits<float>::min()));
  at::Tensor e = exponent.to(at::kFloat);
  const at::Tensor low = m.lt(kSqrtHalf);
  at::Tensor r = m - 1.0;
  e = at::where(low, e - 1.0, e);
  r = at::where(low, r + m, r);
  const at::Tensor r2 = r * r, r3 = r2 * r;
  at::Tensor y0 = fma_scalars(r, p[0], p[1]), y1 = fma_scalars(r, p[3], p[4]);
  at::Tensor y2 = fma_scalars(r, p[6], p[7]);
  y0 = fma_f32(y0, r, full_float(p[2], r));
  y1 = fma_f32(y1, r, full_float(p[5], r));
  y2 = fma_f32(y2, r, full_float(p[8], r));
  at::Tensor y = fma_f32(fma_f32(y0, r3, y1), r3, y2);
  y = fma_f32(y, r3, e * kLn2Lo);
  at::Tensor result = ((r - r2 * 0.5) + y) + e * kLn2Hi;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  result = at::where(x.isinf(), x, result);
  result = at::where(x.eq(0), full_float(-inf, x), result);
  return at::where(x.isnan().logical_or(x.lt(0)), full_float(nan, x), result);
}

at::Tensor log1p_f32(const at::Tensor& x) {
  at::Tensor num = fma_scalars(x, kLog1pNum[0], kLog1pNum[1]);
  at::Tensor den = fma_scalars(x, kLog1pDen[0], kLog1pDen[1]);
  for (int i = 2; i < 7; ++i) {
    num = fma_f32(num, x, full_float(kLog1pNum[i], x));
    den = fma_f32(den, x, full_float(kLog1pDen[i], x));
  }
  const at::Tensor x2 = x * x;
  const at::Tensor near = x + (x2 * -0.5 + (x * x2) * (num / den));
  const at::Tensor far = log_f32(x + 1.0);
  return at::where(x.abs().lt(kLog1pNear), near, far);
}

at::Tensor erf_inv_f32(const at::Tensor& x) {
  const at::Tensor w = log1p_f32((x * x).neg()).neg();
  const at::Tensor central = w.lt(5.0);
  const at::Tensor t = at::where(central, w - 2.5, sqrt_f32(w) - 3.0);
  auto coefficient = [&](int i) {
    return at::where(central, full_float(kErfInvCentral[i], x), full_float(kErfInvTail[i], x));
  };
  at::Tensor p = coefficient(0);
  for (int i = 1; i < 9; ++i) p = fma_f32(p, t, coefficient(i));
  const at::Tensor result = p * x;
  const float inf = std::numeric_limits<float>::infinity();
  return at::where(x.abs().eq(1), x * inf, result);
}

}  // namespace nnx::detail::random_ops
