// JAX-compatible PRNG keys (threefry2x32, jax.random.key/fold_in/split) and samplers that
// return any block of an array equal to the same slice of the whole (JAX's partitionable mode).
#pragma once

#include <nnx/core/shape.h>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace nnx::random {

// A threefry key, as JAX's key_data: words = [k0, k1].
struct Key {
  std::array<uint32_t, 2> words{0, 0};
  bool operator==(const Key&) const = default;
};

std::string to_string(const Key& key);  // "Key(0, 42)"

// Threefry-2x32 with 20 rounds (Random123, jax._src.prng.threefry2x32).
std::array<uint32_t, 2> threefry2x32(std::array<uint32_t, 2> key,
                                     std::array<uint32_t, 2> counter);

// jax.random.key(seed) with threefry, as JAX with x64 disabled (the default, and Flax's): every
// seed gives [0, uint32(seed)], its low 32 bits (seeds beyond int32 wrap, as they do there; JAX
// with x64 enabled would give [seed >> 32, seed & 0xffffffff] instead).
Key key(int64_t seed);

// jax.random.fold_in: threefry2x32(key, {0, data}).
Key fold_in(const Key& key, uint32_t data);

// jax.random.split, partitionable (the default since JAX 0.5): element i is
// threefry2x32(key, {hi32(i), lo32(i)}), so split(key, n)[i] == fold_in(key, i).
std::vector<Key> split(const Key& key, int64_t n = 2);

std::array<uint32_t, 2> key_data(const Key& key);
Key wrap_key_data(std::array<uint32_t, 2> data);

// The random bits of element `index` (global row-major linear index), partitionable mode:
// o = threefry2x32(key, {hi32(index), lo32(index)}); 32 bits: o[0] ^ o[1]; 64: o[0] << 32 | o[1].
uint32_t bits32_at(const Key& key, uint64_t index);
uint64_t bits64_at(const Key& key, uint64_t index);

// Every sampler takes the global shape and an optional block (default: the whole array) and
// returns that block only, equal to the same slice of the whole array. Given a device, the
// block is computed there with tensor ops, bitwise equal to the host computation; without one,
// on the host (a threaded scalar loop).

// jax.random.bits (32-bit) as an at::kLong tensor holding the uint32 values.
at::Tensor bits(const Key& key, const Shape& shape, const std::optional<Box>& block = {},
                std::optional<at::Device> device = {});
// 64-bit bits, their pattern stored in an at::kLong tensor (two's complement).
at::Tensor bits64(const Key& key, const Shape& shape, const std::optional<Box>& block = {},
                  std::optional<at::Device> device = {});

// Options of the floating samplers. Values are computed with JAX's float32 algorithms; other
// floating dtypes are computed in float32 and cast (so not bitwise JAX for those dtypes).
struct Sample {
  at::ScalarType dtype = at::kFloat;
  std::optional<Box> block;
  std::optional<at::Device> device;  // default: the host
};

// jax.random.uniform: values in [minval, maxval), bitwise JAX in float32.
at::Tensor uniform(const Key& key, const Shape& shape, double minval = 0, double maxval = 1,
                   const Sample& options = {});
// jax.random.normal: sqrt(2) * erf_inv(uniform(nextafter(-1, 0), 1)).
at::Tensor normal(const Key& key, const Shape& shape, const Sample& options = {});
// jax.random.truncated_normal: standard normal restricted to (lower, upper).
at::Tensor truncated_normal(const Key& key, double lower, double upper, const Shape& shape,
                            const Sample& options = {});
// jax.random.bernoulli: a bool tensor, true where uniform float32 < float32(p).
at::Tensor bernoulli(const Key& key, double p, const Shape& shape,
                     const std::optional<Box>& block = {},
                     std::optional<at::Device> device = {});

// The device initializers sample on (sharded initialization sets it to the mesh's accelerator
// while it computes blocks); unset by default: the host. Per thread.
std::optional<at::Device> sampling_device();
class SamplingDeviceScope {
 public:
  explicit SamplingDeviceScope(std::optional<at::Device> device);
  ~SamplingDeviceScope();
  SamplingDeviceScope(const SamplingDeviceScope&) = delete;
  SamplingDeviceScope& operator=(const SamplingDeviceScope&) = delete;

 private:
  std::optional<at::Device> previous_;
};

}  // namespace nnx::random

namespace nnx::detail {

// XLA's float32 erf (Eigen's rational approximation) and erf_inv (Giles' polynomials).
float erf_f32(float x);
float erf_inv_f32(float x);
// XLA's float32 log and log1p on CPU, bit for bit (erf_inv needs them to match JAX).
float log_f32(float x);
float log1p_f32(float x);

// Throws unless dtype is a floating type, naming `who` and the dtype.
void check_floating(at::ScalarType dtype, const char* who);

}  // namespace nnx::detail
