// The samplers computed with tensor ops on a device equal the host loop bit for bit: on the CPU
// device here, and on a GPU where one is visible (the same cases, one device parameter).
#include <nnx/core/detail/random_tensor.h>
#include <nnx/core/random.h>
#include <nnx/sharding/device.h>

#include <ATen/ATen.h>
#include "../catch_after_torch.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace nnx;

namespace {

// Every device the cases run on: the CPU, plus the first GPU where one is visible.
std::vector<at::Device> devices_under_test() {
  std::vector<at::Device> devices{at::kCPU};
  if (cuda_device_count() > 0)
    devices.emplace_back(at::kCUDA, 0);
  else
    WARN("no CUDA device: the GPU part skipped, the CPU checked alone");
  return devices;
}

// Bitwise equality of two tensors of the same dtype (NaNs with the same payload compare equal).
bool same_bits(const at::Tensor& device_result, const at::Tensor& host) {
  const at::Tensor a = device_result.cpu().contiguous(), b = host.contiguous();
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  return std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

struct BlockCase {
  Shape shape;
  Box box;
};

// A small whole array, a block with offsets, a block whose linear indices pass 2^32 (so the
// counter's high word is non-zero), and a block sampled in several slabs of rows.
std::vector<BlockCase> block_cases() {
  return {{{5, 7}, Box::whole({5, 7})},
          {{40, 30, 20}, {{3, 5, 7}, {20, 10, 9}}},
          {{1 << 20, 1 << 13}, {{600000, 100}, {8, 64}}},
          {{2600, 1000}, {{10, 1}, {2590, 999}}}};
}

// A block one of whose leading rows alone is past the slab size (split along the next dim).
BlockCase wide_rows_case() { return {{3, 2200, 1000}, {{1, 0, 0}, {2, 2200, 1000}}}; }

// Bytes of a float.
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float as_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace

TEST_CASE("bits and bits64 on a device equal the host's", "[gpu]") {
  const auto k = random::key(7);
  for (const at::Device device : devices_under_test()) {
    for (const auto& c : block_cases()) {
      INFO("device " << device << " shape " << to_string(c.shape));
      CHECK(same_bits(random::bits(k, c.shape, c.box, device), random::bits(k, c.shape, c.box)));
      CHECK(same_bits(random::bits64(k, c.shape, c.box, device),
                      random::bits64(k, c.shape, c.box)));
    }
    const BlockCase wide = wide_rows_case();
    CHECK(same_bits(random::bits(k, wide.shape, wide.box, device),
                    random::bits(k, wide.shape, wide.box)));
    CHECK(same_bits(random::uniform(k, wide.shape, 0, 1, {.block = wide.box, .device = device}),
                    random::uniform(k, wide.shape, 0, 1, {.block = wide.box})));
  }
}

TEST_CASE("float samplers on a device equal the host's bit for bit", "[gpu]") {
  const auto k = random::key(2024);
  for (const at::Device device : devices_under_test()) {
    for (const auto& c : block_cases()) {
      INFO("device " << device << " shape " << to_string(c.shape));
      const random::Sample host{.block = c.box};
      const random::Sample there{.block = c.box, .device = device};
      CHECK(same_bits(random::uniform(k, c.shape, 0, 1, there),
                      random::uniform(k, c.shape, 0, 1, host)));
      CHECK(same_bits(random::uniform(k, c.shape, -0.3, 2.7, there),
                      random::uniform(k, c.shape, -0.3, 2.7, host)));
      CHECK(same_bits(random::uniform(k, c.shape, -0.0, 0.0, there),  // all -0, as the host
                      random::uniform(k, c.shape, -0.0, 0.0, host)));
      CHECK(same_bits(random::normal(k, c.shape, there), random::normal(k, c.shape, host)));
      CHECK(same_bits(random::truncated_normal(k, -2, 2, c.shape, there),
                      random::truncated_normal(k, -2, 2, c.shape, host)));
      CHECK(same_bits(random::truncated_normal(k, 0.5, 3, c.shape, there),
                      random::truncated_normal(k, 0.5, 3, c.shape, host)));
      CHECK(same_bits(random::bernoulli(k, 0.3, c.shape, c.box, device),
                      random::bernoulli(k, 0.3, c.shape, c.box)));
      const random::Sample half{.dtype = at::kBFloat16, .block = c.box, .device = device};
      CHECK(same_bits(random::normal(k, c.shape, half),
                      random::normal(k, c.shape, {.dtype = at::kBFloat16, .block = c.box})));
    }
  }
}

TEST_CASE("normal on a device matches the host in both erf_inv branches", "[gpu]") {
  // |normal| past about 2.93 comes from erf_inv's tail polynomial (w >= 5); 400k samples hold
  // about a thousand such values.
  const auto k = random::key(99);
  const Shape shape{400000};
  const at::Tensor host = random::normal(k, shape);
  REQUIRE(host.abs().gt(2.95).sum().item<int64_t>() > 100);
  REQUIRE(host.abs().lt(2.9).sum().item<int64_t>() > 100000);
  for (const at::Device device : devices_under_test()) {
    INFO("device " << device);
    CHECK(same_bits(random::normal(k, shape, {.device = device}), host));
  }
}

TEST_CASE("the tensor fma rounds once, where float64 arithmetic alone rounds twice", "[gpu]") {
  namespace ops = nnx::detail::random_ops;
  // a * b + c = (1 + 2^-23) + 2^-24 - 2^-70: just below the midpoint between 1 + 2^-23 and
  // 1 + 2^-22. Rounded to float64 first it lands on the midpoint and then rounds to even.
  const float a = std::ldexp(1.0f + std::ldexp(1.0f, -23), -24);
  const float b = 1.0f - std::ldexp(1.0f, -23);
  const float c = 1.0f + std::ldexp(1.0f, -23);
  const float exact = std::fma(a, b, c);
  const float twice = static_cast<float>(static_cast<double>(a) * b + c);
  REQUIRE(exact != twice);  // the case is a hard one
  // Random operands over a wide range of exponents and signs.
  std::mt19937 gen(5);
  std::uniform_int_distribution<uint32_t> mantissa(0, (1u << 23) - 1);
  std::uniform_int_distribution<uint32_t> exponent(100, 154);
  std::bernoulli_distribution negative(0.5);
  const int n = 200000;
  std::vector<float> av(n + 1), bv(n + 1), cv(n + 1), want(n + 1);
  for (int i = 0; i < n; ++i) {
    auto draw = [&](uint32_t e) {
      return as_float((negative(gen) ? 0x80000000u : 0u) | (e << 23) | mantissa(gen));
    };
    const uint32_t ea = exponent(gen), eb = exponent(gen);
    av[i] = draw(ea);
    bv[i] = draw(eb);
    cv[i] = draw(std::min<uint32_t>(254, ea + eb - 127 + (gen() % 5) - 2));  // near a * b
    want[i] = std::fma(av[i], bv[i], cv[i]);
  }
  av[n] = a, bv[n] = b, cv[n] = c, want[n] = exact;
  // Negated, the exact value lies just above a midpoint: the other rounding direction.
  av.push_back(-a), bv.push_back(b), cv.push_back(-c), want.push_back(std::fma(-a, b, -c));
  REQUIRE(want.back() != static_cast<float>(-static_cast<double>(a) * b - c));
  auto tensor = [](std::vector<float>& v) {
    return at::from_blob(v.data(), {static_cast<int64_t>(v.size())}, at::kFloat).clone();
  };
  for (const at::Device device : devices_under_test()) {
    INFO("device " << device);
    const at::Tensor got =
        ops::fma_f32(tensor(av).to(device), tensor(bv).to(device), tensor(cv).to(device));
    CHECK(same_bits(got, tensor(want)));
  }
}

TEST_CASE("the tensor square root is correctly rounded", "[gpu]") {
  namespace ops = nnx::detail::random_ops;
  // Zero, tiny and huge values, exact squares, and a million random floats in [0, 100).
  std::vector<float> xs{0.0f, 1.0f, 4.0f, 2.0f, 1e-38f, 1e-45f, 3e38f, 25.0f, 0.5f};
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> wide(0.0f, 100.0f);
  for (int i = 0; i < 1000000; ++i) xs.push_back(wide(gen));
  std::vector<float> want(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) want[i] = std::sqrt(xs[i]);
  const auto n = static_cast<int64_t>(xs.size());
  const at::Tensor x = at::from_blob(xs.data(), {n}, at::kFloat).clone();
  const at::Tensor expected = at::from_blob(want.data(), {n}, at::kFloat).clone();
  for (const at::Device device : devices_under_test()) {
    INFO("device " << device);
    CHECK(same_bits(ops::sqrt_f32(x.to(device)), expected));
  }
}

TEST_CASE("log1p and erf_inv as tensor ops equal the host's at their branch points", "[gpu]") {
  namespace ops = nnx::detail::random_ops;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> erf_inputs{0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.25f, 1e-30f, -1e-38f};
  // Around w = -log1p(-x^2) = 5, where erf_inv changes polynomials.
  const float x5 = static_cast<float>(std::sqrt(1 - std::exp(-5.0)));
  float below = x5, above = x5;
  for (int i = 0; i < 8; ++i) {
    erf_inputs.insert(erf_inputs.end(), {below, -below, above = std::nextafter(above, 1.0f)});
    below = std::nextafter(below, 0.0f);
  }
  erf_inputs.push_back(std::nextafter(1.0f, 0.0f));
  erf_inputs.push_back(std::nextafter(-1.0f, 0.0f));
  std::vector<float> log1p_inputs{0.0f, -0.0f, 1e-30f, -0.5f, 3.0f, 1e30f, inf, -1.0f, -2.0f};
  for (float edge : {0.41421356237309504880f, -0.41421356237309504880f}) {
    float x = edge;
    for (int i = 0; i < 4; ++i) log1p_inputs.push_back(x = std::nextafter(x, 0.0f));
    x = edge;
    for (int i = 0; i < 4; ++i) log1p_inputs.push_back(x = std::nextafter(x, 2 * edge));
  }
  auto tensor = [](const std::vector<float>& v) {
    return at::tensor(at::ArrayRef<float>(v), at::kFloat);
  };
  auto host = [](const std::vector<float>& v, float (*f)(float)) {
    std::vector<float> out;
    for (float x : v) out.push_back(f(x));
    return at::tensor(at::ArrayRef<float>(out), at::kFloat);
  };
  for (const at::Device device : devices_under_test()) {
    INFO("device " << device);
    const at::Tensor erf_got = ops::erf_inv_f32(tensor(erf_inputs).to(device)).cpu();
    const at::Tensor erf_want = host(erf_inputs, nnx::detail::erf_inv_f32);
    for (size_t i = 0; i < erf_inputs.size(); ++i) {
      INFO("erf_inv(" << erf_inputs[i] << ")");
      CHECK(bits_of(erf_got[i].item<float>()) == bits_of(erf_want[i].item<float>()));
    }
    const at::Tensor log_got = ops::log1p_f32(tensor(log1p_inputs).to(device)).cpu();
    const at::Tensor log_want = host(log1p_inputs, nnx::detail::log1p_f32);
    for (size_t i = 0; i < log1p_inputs.size(); ++i) {
      INFO("log1p(" << log1p_inputs[i] << ")");
      const float got = log_got[i].item<float>(), want = log_want[i].item<float>();
      CHECK((bits_of(got) == bits_of(want) || (std::isnan(got) && std::isnan(want))));
    }
  }
}

TEST_CASE("truncated_normal with a saturated bound matches the host", "[gpu]") {
  const auto k = random::key(8);
  const Shape shape{50000};
  for (const at::Device device : devices_under_test()) {
    INFO("device " << device);
    CHECK(same_bits(random::truncated_normal(k, -8, 0.5, shape, {.device = device}),
                    random::truncated_normal(k, -8, 0.5, shape)));
  }
}

TEST_CASE("a sampling device scope nests and restores") {
  CHECK_FALSE(random::sampling_device().has_value());
  {
    random::SamplingDeviceScope outer(at::Device(at::kCPU));
    CHECK(random::sampling_device() == at::Device(at::kCPU));
    {
      random::SamplingDeviceScope inner(std::nullopt);
      CHECK_FALSE(random::sampling_device().has_value());
    }
    CHECK(random::sampling_device() == at::Device(at::kCPU));
  }
  CHECK_FALSE(random::sampling_device().has_value());
}
