// Tests of nnx::initializers: JAX's formulas, fans, target variances, and blocks that equal the
// same slice of the whole array for every initializer.
#include <nnx/core/error.h>
#include <nnx/framework/initializers.h>
#include <nnx/sharding/device.h>

#include <ATen/ATen.h>
#include "../catch_after_torch.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace nnx;
using Catch::Contains;
namespace init = nnx::initializers;

namespace {

// The slice of `whole` that `box` covers.
at::Tensor slice_of(at::Tensor whole, const Box& box) {
  for (size_t d = 0; d < box.start.size(); ++d)
    whole = whole.narrow(static_cast<int64_t>(d), box.start[d], box.size[d]);
  return whole;
}

at::Tensor whole_of(const Initializer& i, const random::Key& key, const Shape& shape,
                    at::ScalarType dtype = at::kFloat) {
  return i.fn(key, shape, dtype, Box::whole(shape));
}

double variance_of(const at::Tensor& t) { return t.to(at::kDouble).var().item<double>(); }

struct ShapeCase {
  Shape shape;
  std::vector<Box> boxes;
};

// 2-d to 4-d shapes (variance scaling needs rank >= 2), each with odd boxes.
std::vector<ShapeCase> shape_cases() {
  return {
      {{5, 7},
       {Box{{1, 2}, {3, 4}}, Box{{0, 6}, {5, 1}}, Box{{4, 0}, {1, 7}}, Box{{2, 3}, {0, 2}}}},
      {{3, 4, 5},
       {Box{{1, 1, 1}, {2, 2, 3}}, Box{{0, 3, 0}, {3, 1, 5}}, Box{{2, 0, 4}, {1, 4, 1}}}},
      {{3, 3, 4, 6}, {Box{{1, 0, 2, 1}, {2, 3, 2, 5}}, Box{{2, 2, 3, 5}, {1, 1, 1, 1}}}},
  };
}

std::vector<std::pair<std::string, Initializer>> all_initializers() {
  using init::Distribution;
  using init::FanMode;
  return {
      {"zeros", init::zeros()},
      {"ones", init::ones()},
      {"constant", init::constant(0.25)},
      {"normal", init::normal(0.5)},
      {"uniform", init::uniform(3.0)},
      {"truncated_normal", init::truncated_normal(0.2, -1, 1.5)},
      {"variance_scaling fan_out normal",
       init::variance_scaling(0.7, FanMode::fan_out, Distribution::normal)},
      {"variance_scaling fan_geo_avg uniform",
       init::variance_scaling(1.3, FanMode::fan_geo_avg, Distribution::uniform)},
      {"lecun_normal", init::lecun_normal()},
      {"lecun_uniform", init::lecun_uniform()},
      {"glorot_normal", init::glorot_normal()},
      {"glorot_uniform", init::glorot_uniform()},
      {"he_normal", init::he_normal()},
      {"he_uniform", init::he_uniform()},
      {"xavier_uniform", init::xavier_uniform()},
      {"kaiming_normal", init::kaiming_normal({.in_axis = {0}, .out_axis = {1}})},
      {"as_matrix lecun_normal", as_matrix(init::lecun_normal(), 1)},
  };
}

}  // namespace

TEST_CASE("zeros, ones and constant fill the block with their value in any dtype") {
  const auto k = random::key(0);
  const Box box{{1, 0}, {2, 3}};
  const at::Tensor z = init::zeros().fn(k, {4, 3}, at::kFloat, box);
  REQUIRE(z.sizes() == at::IntArrayRef({2, 3}));
  CHECK(at::equal(z, at::zeros({2, 3})));
  const at::Tensor o = init::ones().fn(k, {4, 3}, at::kLong, box);
  REQUIRE(o.scalar_type() == at::kLong);
  CHECK(o.sum().item<int64_t>() == 6);
  const at::Tensor c = init::constant(2.5).fn(k, {4, 3}, at::kDouble, box);
  REQUIRE(c.scalar_type() == at::kDouble);
  CHECK(at::equal(c, at::full({2, 3}, 2.5, at::kDouble)));
}

TEST_CASE("every initializer's block equals the same slice of the whole array") {
  const auto k = random::key(21);
  for (const auto& [name, initializer] : all_initializers()) {
    for (const auto& c : shape_cases()) {
      const at::Tensor whole = whole_of(initializer, k, c.shape);
      REQUIRE(whole.sizes() == at::IntArrayRef(c.shape));
      for (const auto& box : c.boxes) {
        INFO(name << " shape " << to_string(c.shape) << " block start " << to_string(box.start)
                  << " size " << to_string(box.size));
        const at::Tensor block = initializer.fn(k, c.shape, at::kFloat, box);
        REQUIRE(block.sizes() == at::IntArrayRef(box.size));
        CHECK(at::equal(block, slice_of(whole, box)));
      }
    }
  }
}

TEST_CASE("every initializer samples on the sampling device, bitwise the host's values", "[gpu]") {
  std::vector<at::Device> devices{at::kCPU};
  if (cuda_device_count() > 0)
    devices.emplace_back(at::kCUDA, 0);
  else
    WARN("no CUDA device: the GPU part skipped, the CPU checked alone");
  const auto k = random::key(23);
  for (const at::Device device : devices) {
    for (const auto& [name, initializer] : all_initializers()) {
      for (const auto& c : shape_cases()) {
        for (const auto& box : c.boxes) {
          INFO(name << " on " << device << ", shape " << to_string(c.shape) << " block start "
                    << to_string(box.start));
          const at::Tensor host = initializer.fn(k, c.shape, at::kFloat, box);
          random::SamplingDeviceScope sampling(device);
          const at::Tensor there = initializer.fn(k, c.shape, at::kFloat, box);
          CHECK(there.device() == device);
          const at::Tensor back = there.cpu().contiguous();
          REQUIRE(back.sizes() == host.sizes());
          CHECK(std::memcmp(back.data_ptr(), host.contiguous().data_ptr(), back.nbytes()) == 0);
        }
      }
    }
  }
}

TEST_CASE("elementwise initializers give 1-d blocks equal to the slice of the whole") {
  const auto k = random::key(22);
  const Shape shape{13};
  for (const auto& i : {init::normal(), init::uniform(), init::truncated_normal(), init::ones()}) {
    const at::Tensor whole = whole_of(i, k, shape);
    for (const auto& box : {Box{{0}, {1}}, Box{{5}, {7}}, Box{{12}, {1}}, Box{{3}, {0}}})
      CHECK(at::equal(i.fn(k, shape, at::kFloat, box), slice_of(whole, box)));
  }
}

TEST_CASE("normal, uniform and truncated_normal scale the unit samplers in float32") {
  const auto k = random::key(3);
  const Shape shape{40, 30};
  CHECK(at::equal(whole_of(init::normal(0.5), k, shape), random::normal(k, shape) * 0.5f));
  CHECK(at::equal(whole_of(init::uniform(2.0), k, shape), random::uniform(k, shape) * 2.0f));
  CHECK(at::equal(whole_of(init::truncated_normal(0.1, -1, 1), k, shape),
                  random::truncated_normal(k, -1, 1, shape) * 0.1f));
  const at::Tensor u = whole_of(init::uniform(2.0), k, shape);
  CHECK(u.min().item<float>() >= 0.0f);
  CHECK(u.max().item<float>() < 2.0f);
  const at::Tensor t = whole_of(init::truncated_normal(0.1, -1, 1), k, shape);
  CHECK(t.abs().max().item<float>() < 0.1f);
}

TEST_CASE("compute_fans follows JAX for dense, conv and batched shapes") {
  auto fans = init::compute_fans({3, 5});
  CHECK(fans.fan_in == 3);
  CHECK(fans.fan_out == 5);
  // A 3x3 HWIO convolution kernel: receptive field 9.
  fans = init::compute_fans({3, 3, 16, 32});
  CHECK(fans.fan_in == 144);
  CHECK(fans.fan_out == 288);
  // An OIHW kernel, axes given explicitly and from the front.
  fans = init::compute_fans({32, 16, 5, 5}, {.in_axis = {1}, .out_axis = {0}});
  CHECK(fans.fan_in == 16 * 25);
  CHECK(fans.fan_out == 32 * 25);
  // A batch axis divides out of the receptive field.
  fans = init::compute_fans({2, 3, 5, 7}, {.batch_axis = {0}});
  CHECK(fans.fan_in == 15);
  CHECK(fans.fan_out == 21);
  // Several input axes multiply.
  fans = init::compute_fans({2, 3, 4}, {.in_axis = {0, 1}, .out_axis = {-1}});
  CHECK(fans.fan_in == 6);
  CHECK(fans.fan_out == 4);
}

TEST_CASE("variance scaling values equal JAX's float32 formulas") {
  const auto k = random::key(12);
  const Shape shape{3, 3, 8, 16};  // fan_in 72, fan_out 144
  const float v_lecun = static_cast<float>(1.0 / 72);
  CHECK(at::equal(whole_of(init::lecun_normal(), k, shape),
                  random::truncated_normal(k, -2, 2, shape) *
                      (std::sqrt(v_lecun) / static_cast<float>(0.87962566103423978))));
  const float v_he = static_cast<float>(2.0 / 72);
  CHECK(at::equal(whole_of(init::he_uniform(), k, shape),
                  random::uniform(k, shape, -1, 1) * std::sqrt(3.0f * v_he)));
  const float v_glorot = static_cast<float>(1.0 / ((72.0 + 144.0) / 2));
  CHECK(at::equal(
      whole_of(init::variance_scaling(1, init::FanMode::fan_avg, init::Distribution::normal), k,
               shape),
      random::normal(k, shape) * std::sqrt(v_glorot)));
  // Aliases are the same initializers.
  CHECK(at::equal(whole_of(init::xavier_normal(), k, shape),
                  whole_of(init::glorot_normal(), k, shape)));
  CHECK(at::equal(whole_of(init::kaiming_uniform(), k, shape),
                  whole_of(init::he_uniform(), k, shape)));
}

TEST_CASE("lecun_normal has variance 1 / fan_in") {
  const auto k = random::key(13);
  CHECK(variance_of(whole_of(init::lecun_normal(), k, {256, 400})) ==
        Approx(1.0 / 256).epsilon(0.03));
  // A conv kernel: fan_in = 3 * 3 * 32.
  CHECK(variance_of(whole_of(init::lecun_normal(), k, {3, 3, 32, 64})) ==
        Approx(1.0 / 288).epsilon(0.03));
  const at::Tensor w = whole_of(init::lecun_normal(), k, {256, 400});
  CHECK(w.abs().max().item<float>() < 2.0f * std::sqrt(1.0f / 256) / 0.8796f);
}

TEST_CASE("he, glorot and lecun initializers reach their target variances") {
  const auto k = random::key(14);
  const Shape shape{200, 500};  // fan_in 200, fan_out 500
  CHECK(variance_of(whole_of(init::he_normal(), k, shape)) == Approx(2.0 / 200).epsilon(0.03));
  CHECK(variance_of(whole_of(init::he_uniform(), k, shape)) == Approx(2.0 / 200).epsilon(0.03));
  CHECK(variance_of(whole_of(init::lecun_uniform(), k, shape)) ==
        Approx(1.0 / 200).epsilon(0.03));
  CHECK(variance_of(whole_of(init::glorot_normal(), k, shape)) ==
        Approx(2.0 / 700).epsilon(0.03));
  CHECK(variance_of(whole_of(init::glorot_uniform(), k, shape)) ==
        Approx(2.0 / 700).epsilon(0.03));
  const auto geo =
      init::variance_scaling(1, init::FanMode::fan_geo_avg, init::Distribution::normal);
  CHECK(variance_of(whole_of(geo, k, shape)) ==
        Approx(1.0 / std::sqrt(200.0 * 500)).epsilon(0.03));
  const auto out = init::variance_scaling(3, init::FanMode::fan_out, init::Distribution::uniform);
  const at::Tensor u = whole_of(out, k, shape);
  CHECK(variance_of(u) == Approx(3.0 / 500).epsilon(0.03));
  CHECK(u.abs().max().item<float>() <= std::sqrt(3.0f * static_cast<float>(3.0 / 500)));
}

TEST_CASE("initializers in non-float32 dtypes are the float32 values cast") {
  const auto k = random::key(15);
  const Shape shape{6, 10};
  const at::Tensor d = whole_of(init::lecun_normal(), k, shape, at::kDouble);
  REQUIRE(d.scalar_type() == at::kDouble);
  CHECK(at::equal(d, whole_of(init::lecun_normal(), k, shape).to(at::kDouble)));
  const at::Tensor h = whole_of(init::normal(0.3), k, shape, at::kBFloat16);
  CHECK(at::equal(h, whole_of(init::normal(0.3), k, shape).to(at::kBFloat16)));
}

TEST_CASE("initializers report bad shapes, axes, blocks and dtypes") {
  const auto k = random::key(0);
  CHECK_THROWS_AS(whole_of(init::lecun_normal(), k, {5}), Error);
  CHECK_THROWS_WITH(whole_of(init::lecun_normal(), k, {5}),
                    Contains("[variance_scaling]") && Contains("shape (5,)") &&
                        Contains("at least 2 dims"));
  CHECK_THROWS_WITH(whole_of(init::he_uniform({.in_axis = {-3}}), k, {4, 5}),
                    Contains("in_axis -3 is out of range for shape (4, 5) of rank 2"));
  CHECK_THROWS_WITH(whole_of(init::glorot_uniform({.out_axis = {2}}), k, {4, 5}),
                    Contains("out_axis 2 is out of range"));
  CHECK_THROWS_WITH(init::compute_fans({4, 5}, {.batch_axis = {7}}),
                    Contains("[compute_fans]") && Contains("batch_axis 7"));
  CHECK_THROWS_WITH(init::lecun_normal().fn(k, {4, 5}, at::kFloat, Box{{3, 0}, {2, 5}}),
                    Contains("[variance_scaling]") && Contains("does not lie inside shape (4, 5)"));
  CHECK_THROWS_WITH(init::zeros().fn(k, {4}, at::kFloat, Box{{0, 0}, {1, 1}}),
                    Contains("[zeros]") && Contains("does not lie inside shape (4,)"));
  CHECK_THROWS_WITH(whole_of(init::normal(), k, {3}, at::kLong),
                    Contains("[normal]") && Contains("dtype Long is not a floating type"));
  CHECK_THROWS_WITH(whole_of(init::he_normal(), k, {3, 3}, at::kInt),
                    Contains("[variance_scaling]") && Contains("not a floating type"));
  CHECK_THROWS_WITH(init::truncated_normal(0.1, 1, -1), Contains("lower 1 must be below upper -1"));
  CHECK_THROWS_WITH(
      init::variance_scaling(-1, init::FanMode::fan_in, init::Distribution::normal),
      Contains("scale -1 must be >= 0"));
}
