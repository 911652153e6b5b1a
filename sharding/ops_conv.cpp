// 2-d convolution on NHWC inputs and HWIO kernels (Flax's layout). Rule: the batch dim keeps
// its axes (data parallel), output channels follow the kernel's out dim, and input channels
// split the same way on both sides give a pending sum; spatial dims are gathered (a fallback).
#include <nnx/core/error.h>
#include <nnx/sharding/ops.h>
#include <nnx/sharding/detail/ops_common.h>

#include <torch/types.h>

namespace nnx {

using namespace detail;

namespace {

// JAX's padding for one spatial dim: SAME keeps ceil(in / stride) outputs, low side first.
std::pair<int64_t, int64_t> padding_of(const std::string& padding, int64_t in, int64_t k,
                                       int64_t stride) {
  if (padding == "VALID") return {0, 0};
  NNX_CHECK(padding == "SAME", "padding must be \"SAME\" or \"VALID\", got \"{}\"", padding);
  const int64_t out = (in + stride - 1) / stride;
  const int64_t total = std::max<int64_t>((out - 1) * stride + k - in, 0);
  return {total / 2, total - total / 2};
}

at::Tensor conv_local(const at::Tensor& x, const at::Tensor& w, std::array<int64_t, 2> strides,
                      const std::string& padding) {
  at::Tensor nchw = x.permute({0, 3, 1, 2});
  at::Tensor oihw = w.permute({3, 2, 0, 1});
  auto [top, bottom] = padding_of(padding, x.size(1), w.size(0), strides[0]);
  auto [left, right] = padding_of(padding, x.size(2), w.size(1), strides[1]);
  if (top != bottom || left != right) {
    nchw = at::constant_pad_nd(nchw, {left, right, top, bottom});
    top = bottom = left = right = 0;
  }
  at::Tensor y = at::conv2d(nchw, oihw, {}, {strides[0], strides[1]}, {top, left});
  return y.permute({0, 2, 3, 1});
}

}  // namespace

Array conv2d(const Array& x0, const Array& kernel0, std::array<int64_t, 2> strides,
             const std::string& padding) {
  NNX_CHECK(x0.ndim() == 4 && kernel0.ndim() == 4,
            "needs x [batch, height, width, in] and kernel [kh, kw, in, out], got {} and {}",
            shape_str(x0), shape_str(kernel0));
  NNX_CHECK(x0.shape()[3] == kernel0.shape()[2],
            "x has {} input channels, the kernel {}: {} and {}", x0.shape()[3],
            kernel0.shape()[2], shape_str(x0), shape_str(kernel0));
  NNX_CHECK(strides[0] >= 1 && strides[1] >= 1, "strides must be >= 1, got ({}, {})",
            strides[0], strides[1]);
  NNX_CHECK(padding != "VALID" || (x0.shape()[1] >= kernel0.shape()[0] &&
                                   x0.shape()[2] >= kernel0.shape()[1]),
            "with VALID padding the kernel's {}x{} window must fit the input's height and width, "
            "{}x{}; pad the input or use SAME", kernel0.shape()[0], kernel0.shape()[1],
            x0.shape()[1], x0.shape()[2]);
  auto mesh = common_mesh({&x0, &kernel0}, "conv2d");
  if (!mesh) return Array(conv_local(x0.local(), kernel0.local(), strides, padding));

  Array x = resolved(on_mesh(x0, mesh)), w = resolved(on_mesh(kernel0, mesh));
  const DimAxes X = dims_of(x), W = dims_of(w);
  Axes used;
  auto take = [&](const Axes& axes) {
    Axes free = without(axes, used);
    used.insert(used.end(), free.begin(), free.end());
    return free;
  };
  const Axes batch = take(X[0]);
  Axes in = take(W[2]);
  if (in.empty()) in = take(X[3]);
  const Axes out = take(W[3]);
  if (!X[1].empty() || !X[2].empty() || !W[0].empty() || !W[1].empty()) ++fallback_count();
  Array lx = relayout(x, {batch, {}, {}, in}, {});
  Array lw = relayout(w, {{}, {}, in, out}, {});
  at::Tensor y = conv_local(lx.local(), lw.local(), strides, padding);
  Shape shape{x.shape()[0], y.size(1), y.size(2), w.shape()[3]};
  return make_result(y, shape, mesh, {batch, {}, {}, out}, in);
}

}  // namespace nnx
