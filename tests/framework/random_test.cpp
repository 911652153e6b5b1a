// Tests of nnx::random: threefry known answers, JAX's published keys and values, and blocks
// that equal the same slice of the whole array for every sampler.
#include <nnx/core/error.h>
#include <nnx/core/random.h>

#include <ATen/ATen.h>
#include "../catch_after_torch.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

using namespace nnx;  // random::key reads as jax.random.key
using Catch::Contains;

namespace {

// The slice of `whole` that `box` covers.
at::Tensor slice_of(at::Tensor whole, const Box& box) {
  for (size_t d = 0; d < box.start.size(); ++d)
    whole = whole.narrow(static_cast<int64_t>(d), box.start[d], box.size[d]);
  return whole;
}

struct ShapeCase {
  Shape shape;
  std::vector<Box> boxes;
};

// 0-d to 3-d shapes, each with odd boxes: interior, edges, single elements, empty.
std::vector<ShapeCase> shape_cases() {
  return {
      {{}, {Box{{}, {}}}},
      {{11}, {Box{{3}, {5}}, Box{{0}, {1}}, Box{{10}, {1}}, Box{{4}, {0}}}},
      {{5, 7},
       {Box{{1, 2}, {3, 4}}, Box{{0, 6}, {5, 1}}, Box{{4, 0}, {1, 7}}, Box{{2, 3}, {0, 2}}}},
      {{3, 4, 5},
       {Box{{1, 1, 1}, {2, 2, 3}}, Box{{0, 3, 0}, {3, 1, 5}}, Box{{2, 0, 4}, {1, 4, 1}},
        Box{{0, 0, 0}, {3, 4, 5}}}},
  };
}

using Sampler = std::function<at::Tensor(const Shape&, const std::optional<Box>&)>;

std::vector<std::pair<std::string, Sampler>> samplers(const random::Key& k) {
  return {
      {"bits", [k](const Shape& s, const std::optional<Box>& b) { return random::bits(k, s, b); }},
      {"bits64",
       [k](const Shape& s, const std::optional<Box>& b) { return random::bits64(k, s, b); }},
      {"uniform",
       [k](const Shape& s, const std::optional<Box>& b) {
         return random::uniform(k, s, -3, 5, {.block = b});
       }},
      {"uniform float64",
       [k](const Shape& s, const std::optional<Box>& b) {
         return random::uniform(k, s, 0, 1, {.dtype = at::kDouble, .block = b});
       }},
      {"normal",
       [k](const Shape& s, const std::optional<Box>& b) {
         return random::normal(k, s, {.block = b});
       }},
      {"truncated_normal",
       [k](const Shape& s, const std::optional<Box>& b) {
         return random::truncated_normal(k, -1.5, 0.7, s, {.block = b});
       }},
      {"bernoulli",
       [k](const Shape& s, const std::optional<Box>& b) {
         return random::bernoulli(k, 0.3, s, b);
       }},
  };
}

double mean_of(const at::Tensor& t) { return t.to(at::kDouble).mean().item<double>(); }
double std_of(const at::Tensor& t) { return t.to(at::kDouble).std().item<double>(); }

}  // namespace

TEST_CASE("threefry2x32 matches the Random123 known answers") {
  CHECK(random::threefry2x32({0u, 0u}, {0u, 0u}) == std::array<uint32_t, 2>{0x6b200159u,
                                                                             0x99ba4efeu});
  CHECK(random::threefry2x32({0x13198a2eu, 0x03707344u}, {0x243f6a88u, 0x85a308d3u}) ==
        std::array<uint32_t, 2>{0xc4923a9cu, 0x483df7a0u});
}

TEST_CASE("key(seed) follows jax.random.key with x64 disabled, 64-bit seeds wrapping") {
  CHECK(random::key_data(random::key(0)) == std::array<uint32_t, 2>{0u, 0u});
  CHECK(random::key_data(random::key(42)) == std::array<uint32_t, 2>{0u, 42u});
  CHECK(random::key_data(random::key(-1)) == std::array<uint32_t, 2>{0u, 0xffffffffu});
  // jax 0.10 (x32): key(2**32 + 5) -> [0, 5], key(-2**31 - 1) -> [0, 2147483647],
  // key(2**40 + 3) -> [0, 3], key(2**31) -> [0, 2147483648].
  CHECK(random::key_data(random::key((int64_t{1} << 32) + 5)) ==
        std::array<uint32_t, 2>{0u, 5u});
  CHECK(random::key_data(random::key(-(int64_t{1} << 31) - 1)) ==
        std::array<uint32_t, 2>{0u, 2147483647u});
  CHECK(random::key_data(random::key((int64_t{1} << 40) + 3)) ==
        std::array<uint32_t, 2>{0u, 3u});
  CHECK(random::key_data(random::key(int64_t{1} << 31)) ==
        std::array<uint32_t, 2>{0u, 2147483648u});
  CHECK(random::to_string(random::key(42)) == "Key(0, 42)");
}

TEST_CASE("fold_in matches JAX's published key data") {
  CHECK(random::key_data(random::fold_in(random::key(0), 0)) ==
        std::array<uint32_t, 2>{1797259609u, 2579123966u});
  CHECK(random::key_data(random::fold_in(random::key(0), 1)) ==
        std::array<uint32_t, 2>{928981903u, 3453687069u});
}

TEST_CASE("split(key, n)[i] equals fold_in(key, i)") {
  for (const auto& k : {random::key(0), random::key(7), random::wrap_key_data({123u, 456u})}) {
    const auto keys = random::split(k, 5);
    REQUIRE(keys.size() == 5);
    for (uint32_t i = 0; i < 5; ++i) CHECK(keys[i] == random::fold_in(k, i));
  }
  // jax.random.split(key(0)) in partitionable mode.
  const auto two = random::split(random::key(0));
  REQUIRE(two.size() == 2);
  CHECK(random::key_data(two[0]) == std::array<uint32_t, 2>{1797259609u, 2579123966u});
  CHECK(random::key_data(two[1]) == std::array<uint32_t, 2>{928981903u, 3453687069u});
  CHECK(random::split(random::key(0), 0).empty());
  CHECK_THROWS_WITH(random::split(random::key(0), -1), Contains("n must be >= 0"));
}

TEST_CASE("key_data and wrap_key_data round-trip") {
  const random::Key k = random::wrap_key_data({0xdeadbeefu, 17u});
  CHECK(k.words == std::array<uint32_t, 2>{0xdeadbeefu, 17u});
  CHECK(random::wrap_key_data(random::key_data(k)) == k);
  CHECK_FALSE(k == random::key(17));
}

TEST_CASE("bits are o[0] ^ o[1] of threefry at the global linear index") {
  const auto k = random::key(3);
  const at::Tensor b = random::bits(k, {2, 3});
  REQUIRE(b.scalar_type() == at::kLong);
  REQUIRE(b.sizes() == at::IntArrayRef({2, 3}));
  const auto o = random::threefry2x32(k.words, {0u, 5u});
  CHECK(b[1][2].item<int64_t>() == static_cast<int64_t>(o[0] ^ o[1]));
  CHECK(random::bits32_at(k, 5) == (o[0] ^ o[1]));
  CHECK(random::bits64_at(k, 5) == ((static_cast<uint64_t>(o[0]) << 32) | o[1]));
  // Indices past 2^32 put their high word in the counter's first word.
  const auto hi = random::threefry2x32(k.words, {1u, 7u});
  CHECK(random::bits32_at(k, (uint64_t{1} << 32) + 7) == (hi[0] ^ hi[1]));
  // Values are uint32: non-negative and below 2^32.
  CHECK(b.min().item<int64_t>() >= 0);
  CHECK(b.max().item<int64_t>() <= int64_t{0xffffffff});
  const at::Tensor b64 = random::bits64(k, {2, 3});
  CHECK(static_cast<uint64_t>(b64[1][2].item<int64_t>()) == random::bits64_at(k, 5));
}

TEST_CASE("uniform of key(0) matches JAX's published values") {
  const at::Tensor u = random::uniform(random::key(0), {3});
  REQUIRE(u.scalar_type() == at::kFloat);
  CHECK(u[0].item<float>() == 0.947667f);
  CHECK(u[1].item<float>() == 0.9785799f);
  CHECK(u[2].item<float>() == 0.33229148f);
}

TEST_CASE("normal of key(0) equals jax.random.normal bit for bit") {
  // jax 0.10: jax.random.normal(jax.random.key(0), (3,)), float32 bits 0x3fcfb2bd, 0x40019df0,
  // 0xbede0017.
  const at::Tensor n = random::normal(random::key(0), {3});
  CHECK(n[0].item<float>() == 1.622642159461975f);
  CHECK(n[1].item<float>() == 2.0252647399902344f);
  CHECK(n[2].item<float>() == -0.4335944354534149f);
}

TEST_CASE("every sampler's block equals the same slice of the whole array") {
  for (const auto& [name, sample] : samplers(random::key(11))) {
    for (const auto& c : shape_cases()) {
      const at::Tensor whole = sample(c.shape, std::nullopt);
      REQUIRE(whole.sizes() == at::IntArrayRef(c.shape));
      CHECK(at::equal(sample(c.shape, Box::whole(c.shape)), whole));
      for (const auto& box : c.boxes) {
        INFO(name << " shape " << nnx::to_string(c.shape) << " block start "
                  << nnx::to_string(box.start) << " size " << nnx::to_string(box.size));
        const at::Tensor block = sample(c.shape, box);
        REQUIRE(block.sizes() == at::IntArrayRef(box.size));
        CHECK(at::equal(block, slice_of(whole, box)));
      }
    }
  }
}

TEST_CASE("large blocks computed in parallel equal the slice of the whole") {
  const auto k = random::key(5);
  const Shape shape{300, 1000};
  const Box box{{17, 3}, {200, 900}};
  CHECK(at::equal(random::normal(k, shape, {.block = box}),
                  slice_of(random::normal(k, shape), box)));
  CHECK(at::equal(random::bits(k, shape, box), slice_of(random::bits(k, shape), box)));
}

TEST_CASE("samplers are deterministic in the key and differ across keys") {
  const Shape shape{64};
  CHECK(at::equal(random::normal(random::key(1), shape), random::normal(random::key(1), shape)));
  CHECK_FALSE(
      at::equal(random::normal(random::key(1), shape), random::normal(random::key(2), shape)));
  const auto keys = random::split(random::key(1), 2);
  CHECK_FALSE(at::equal(random::uniform(keys[0], shape), random::uniform(keys[1], shape)));
}

TEST_CASE("uniform stays in [minval, maxval) with its mean at the midpoint") {
  const at::Tensor u = random::uniform(random::key(2), {100000}, -3, 5);
  CHECK(u.min().item<float>() >= -3.0f);
  CHECK(u.max().item<float>() < 5.0f);
  CHECK(mean_of(u) == Approx(1.0).margin(0.05));
  CHECK(std_of(u) == Approx(8.0 / std::sqrt(12.0)).epsilon(0.01));
}

TEST_CASE("normal has mean 0 and standard deviation 1 over 100k samples") {
  const at::Tensor n = random::normal(random::key(4), {100000});
  CHECK(std::abs(mean_of(n)) < 0.015);
  CHECK(std_of(n) == Approx(1.0).epsilon(0.01));
  CHECK(at::isfinite(n).all().item<bool>());
}

TEST_CASE("truncated_normal stays inside its bounds with the truncated moments") {
  const at::Tensor t = random::truncated_normal(random::key(6), -2, 2, {100000});
  CHECK(t.min().item<float>() > -2.0f);
  CHECK(t.max().item<float>() < 2.0f);
  CHECK(std::abs(mean_of(t)) < 0.015);
  CHECK(std_of(t) == Approx(0.87962566103423978).epsilon(0.01));

  // An asymmetric interval: mean = (phi(a) - phi(b)) / (Phi(b) - Phi(a)).
  const double a = 0.5, b = 3.0;
  const at::Tensor s = random::truncated_normal(random::key(6), a, b, {100000});
  CHECK(s.min().item<float>() > 0.5f);
  CHECK(s.max().item<float>() < 3.0f);
  auto phi = [](double x) { return std::exp(-x * x / 2) / std::sqrt(2 * M_PI); };
  auto cdf = [](double x) { return 0.5 * (1 + std::erf(x / std::sqrt(2.0))); };
  CHECK(mean_of(s) == Approx((phi(a) - phi(b)) / (cdf(b) - cdf(a))).epsilon(0.01));
}

TEST_CASE("bernoulli is true with frequency p") {
  const at::Tensor b = random::bernoulli(random::key(8), 0.3, {100000});
  REQUIRE(b.scalar_type() == at::kBool);
  CHECK(mean_of(b) == Approx(0.3).margin(0.01));
  CHECK_FALSE(random::bernoulli(random::key(8), 0.0, {1000}).any().item<bool>());
  CHECK(random::bernoulli(random::key(8), 1.0, {1000}).all().item<bool>());
  // The same draw as uniform float32 < p.
  CHECK(at::equal(random::bernoulli(random::key(8), 0.3, {50}),
                  random::uniform(random::key(8), {50}).lt(0.3f)));
}

TEST_CASE("non-float32 dtypes are the float32 values cast") {
  const auto k = random::key(9);
  const Shape shape{4, 6};
  const at::Tensor u64 = random::uniform(k, shape, -1, 2, {.dtype = at::kDouble});
  REQUIRE(u64.scalar_type() == at::kDouble);
  CHECK(at::equal(u64, random::uniform(k, shape, -1, 2).to(at::kDouble)));
  const at::Tensor n16 = random::normal(k, shape, {.dtype = at::kHalf});
  REQUIRE(n16.scalar_type() == at::kHalf);
  CHECK(at::equal(n16, random::normal(k, shape).to(at::kHalf)));
  const at::Tensor tb = random::truncated_normal(k, -1, 1, shape, {.dtype = at::kBFloat16});
  CHECK(at::equal(tb, random::truncated_normal(k, -1, 1, shape).to(at::kBFloat16)));
}

TEST_CASE("samplers reject bad blocks, dtypes and arguments") {
  const auto k = random::key(0);
  CHECK_THROWS_AS(random::uniform(k, {4, 4}, 0, 1, {.block = Box{{2, 2}, {3, 1}}}), nnx::Error);
  CHECK_THROWS_WITH(random::uniform(k, {4, 4}, 0, 1, {.block = Box{{2, 2}, {3, 1}}}),
                    Contains("[uniform]") && Contains("does not lie inside shape (4, 4)"));
  CHECK_THROWS_WITH(random::normal(k, {4, 4}, {.block = Box{{0}, {4}}}),
                    Contains("[normal]") && Contains("does not lie inside shape (4, 4)"));
  CHECK_THROWS_WITH(random::bits(k, {5}, Box{{-1}, {2}}), Contains("[bits]"));
  CHECK_THROWS_WITH(random::bernoulli(k, 0.5, {3}, Box{{0}, {4}}), Contains("[bernoulli]"));
  CHECK_THROWS_WITH(random::truncated_normal(k, -2, 2, {3}, {.block = Box{{1}, {3}}}),
                    Contains("[truncated_normal]"));
  CHECK_THROWS_WITH(random::uniform(k, {3}, 0, 1, {.dtype = at::kInt}),
                    Contains("[uniform]") && Contains("dtype Int is not a floating type"));
  CHECK_THROWS_WITH(random::normal(k, {3}, {.dtype = at::kBool}),
                    Contains("not a floating type"));
  CHECK_THROWS_WITH(random::truncated_normal(k, 1, -1, {3}),
                    Contains("lower 1 must be below upper -1"));
  CHECK_THROWS_WITH(random::bernoulli(k, 1.5, {3}), Contains("p = 1.5 is not a probability"));
  CHECK_THROWS_WITH(random::uniform(k, {3, -1}), Contains("shape (3, -1) has a negative"));
}

TEST_CASE("erf and erf_inv follow XLA's float32 approximations") {
  for (float x = -3.5f; x <= 3.5f; x += 0.125f)
    CHECK(nnx::detail::erf_f32(x) == Approx(std::erf(static_cast<double>(x))).margin(3e-7));
  CHECK(nnx::detail::erf_f32(4.0f) == 1.0f);
  CHECK(nnx::detail::erf_f32(-10.0f) == -1.0f);
  for (float y = -0.99f; y <= 0.99f; y += 0.03f)
    CHECK(std::erf(static_cast<double>(nnx::detail::erf_inv_f32(y))) ==
          Approx(y).margin(2e-6));
  CHECK(nnx::detail::erf_inv_f32(0.0f) == 0.0f);
  CHECK(nnx::detail::erf_inv_f32(1.0f) == std::numeric_limits<float>::infinity());
  CHECK(nnx::detail::erf_inv_f32(-1.0f) == -std::numeric_limits<float>::infinity());
}
