// The samplers of core/random.h as tensor ops on any device: threefry in int64 arithmetic and
// JAX's float32 transforms with exactly rounded fused multiply-adds, so a block computed on a
// GPU is bitwise the block the host loop computes.
#pragma once

#include <nnx/core/random.h>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <array>

namespace nnx::detail::random_ops {

// Threefry-2x32 outputs {o0, o1} of every element of `box`, counters = global linear indices;
// int64 tensors holding uint32 values.
std::array<at::Tensor, 2> threefry_block(const random::Key& key, const Shape& shape, const Box& box,
                                         at::Device device);

// 32 random bits per element (o0 ^ o1) and 64 (o0 << 32 | o1, two's complement in int64).
at::Tensor bits32_block(const random::Key& key, const Shape& shape, const Box& box,
                        at::Device device);
at::Tensor bits64_block(const random::Key& key, const Shape& shape, const Box& box,
                        at::Device device);

// float32 in [0, 1) from 32 bits: JAX's mantissa trick.
at::Tensor unit_float(const at::Tensor& bits32);

// fma(a, b, c) on float32 tensors, rounded once: the product and sum in float64, rounded to
// odd, then to float32 (exact because float64 keeps more than 2 * 24 + 1 bits).
at::Tensor fma_f32(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c);

// Correctly rounded float32 square root (LibTorch's CPU kernel may be off by an ulp): the
// float64 root rounded, then moved to the neighbour whose midpoint says so.
at::Tensor sqrt_f32(const at::Tensor& x);

// max(lo, fma(u, span, lo)) as the host's uniform, on a float32 tensor of units.
at::Tensor uniform_from_units(const at::Tensor& units, float lo, float span);

// XLA's float32 log, log1p and erf_inv, bit for bit the host versions (core/random.h).
at::Tensor log_f32(const at::Tensor& x);
at::Tensor log1p_f32(const at::Tensor& x);
at::Tensor erf_inv_f32(const at::Tensor& x);

}  // namespace nnx::detail::random_ops
