// Elementwise ops. Rule: operands take the output's layout on the dims they span (broadcast
// dims whole); pending sums survive where the op is linear in that operand.
#include <nnx/core/error.h>
#include <nnx/sharding/ops.h>
#include <nnx/sharding/redistribute.h>
#include <nnx/sharding/detail/ops_common.h>

#include <torch/torch.h>

#include <source_location>

namespace nnx {

namespace {

using namespace detail;

// How an op treats pending sums of its operands.
enum class Linearity {
  linear,     // a + b, a - b: both may be pending along the same axis
  bilinear,   // a * b: one operand per axis may be pending
  numerator,  // a / b: only a may be pending
};

Shape broadcast_shape(const Array& a, const Array& b, const char* op) {
  size_t n = std::max(a.shape().size(), b.shape().size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.shape().size() ? 1 : a.shape()[i - (n - a.shape().size())];
    int64_t db = i < n - b.shape().size() ? 1 : b.shape()[i - (n - b.shape().size())];
    if (da != db && da != 1 && db != 1)
      throw_error(op, fmt::format("shapes {} and {} do not broadcast (dim {}: {} vs {})",
                                  shape_str(a), shape_str(b), i, da, db));
    out[i] = std::max(da, db);
  }
  return out;
}

// The operand's layout on its own dims for an output laid out as `out`.
DimAxes operand_dims(const Array& x, const Shape& out_shape, const DimAxes& out) {
  size_t offset = out_shape.size() - x.shape().size();
  DimAxes dims(x.shape().size());
  for (size_t i = 0; i < dims.size(); ++i)
    if (x.shape()[i] == out_shape[offset + i]) dims[i] = out[offset + i];
  return dims;
}

template <class Fn>
Array binary(const Array& a0, const Array& b0, Linearity linearity, const char* op, Fn fn) {
  // The common case first: operands laid out alike need no rule (the result is laid out as
  // they are), so it costs what the LibTorch op costs.
  if (a0.mesh() && a0.mesh() == b0.mesh() && a0.shape() == b0.shape() && a0.spec() == b0.spec() &&
      a0.partial_axes().empty() && b0.partial_axes().empty() && !a0.initializer())
    return a0.with_local(fn(a0.local(), b0.local()));
  auto mesh = common_mesh({&a0, &b0}, op);
  Shape shape = broadcast_shape(a0, b0, op);
  if (!mesh) return Array(fn(a0.local(), b0.local()));
  if (all_replicated({&a0, &b0}))
    return replicated_result(fn(a0.local(), b0.local()), std::move(shape), mesh);
  Array a = on_mesh(a0, mesh), b = on_mesh(b0, mesh);
  // Output layout: each dim takes the axes of the first operand that spans it unbroadcast.
  DimAxes out(shape.size());
  Axes used;
  for (const Array* x : {&a, &b}) {
    size_t offset = shape.size() - x->shape().size();
    auto dims = dims_of(*x);
    for (size_t i = 0; i < dims.size(); ++i) {
      auto& slot = out[offset + i];
      if (!slot.empty() || x->shape()[i] != shape[offset + i]) continue;
      bool free = true;
      for (const auto& axis : dims[i]) free &= !contains(used, axis);
      if (!free) continue;
      slot = dims[i];
      used.insert(used.end(), dims[i].begin(), dims[i].end());
    }
  }
  const Axes pa = without(a.partial_axes(), used), pb = without(b.partial_axes(), used);
  Axes partial_a, partial_b;
  switch (linearity) {
    case Linearity::linear:
      partial_a = pa;
      for (const auto& x : pb)
        if (!contains(partial_a, x)) partial_a.push_back(x);
      partial_b = partial_a;
      break;
    case Linearity::bilinear:
      partial_a = pa;
      partial_b = without(pb, pa);
      break;
    case Linearity::numerator:
      partial_a = pa;
      break;
  }
  auto label = RedistributeLabel::fallback(op);
  Array la = relayout(a, operand_dims(a, shape, out), partial_a);
  Array lb = relayout(b, operand_dims(b, shape, out), partial_b);
  Axes partial = partial_a;
  for (const auto& x : partial_b)
    if (!contains(partial, x)) partial.push_back(x);
  return make_result(fn(la.local(), lb.local()), shape, mesh, out, partial);
}

// A unary op; `linear` ones (x * c) keep pending sums, others resolve them first.
// `op` (the calling op, by default) labels a redistribution in NNX_LOG_REDISTRIBUTE's log.
template <class Fn>
Array unary(const Array& a, bool linear, Fn fn,
            std::source_location op = std::source_location::current()) {
  Array x = linear ? a : resolved(a, op);
  if (!x.mesh()) return Array(fn(x.local()));
  if (!x.initializer()) return x.with_local(fn(x.local()));  // laid out as its operand
  return make_result(fn(x.local()), x.shape(), x.mesh(), dims_of(x), x.partial_axes());
}

Array scalar_like(const Array& a, double value) {
  return Array(torch::full({}, value, a.local().options().requires_grad(false)));
}

}  // namespace

Array add(const Array& a, const Array& b) {
  return binary(a, b, Linearity::linear, "add", [](auto& x, auto& y) { return x + y; });
}
Array sub(const Array& a, const Array& b) {
  return binary(a, b, Linearity::linear, "sub", [](auto& x, auto& y) { return x - y; });
}
Array mul(const Array& a, const Array& b) {
  return binary(a, b, Linearity::bilinear, "mul", [](auto& x, auto& y) { return x * y; });
}
Array div(const Array& a, const Array& b) {
  return binary(a, b, Linearity::numerator, "div", [](auto& x, auto& y) { return x / y; });
}
Array add(const Array& a, double b) { return add(a, scalar_like(a, b)); }
Array mul(const Array& a, double b) {
  return unary(a, true, [b](const at::Tensor& x) { return x * b; });
}
Array neg(const Array& a) {
  return unary(a, true, [](const at::Tensor& x) { return -x; });
}
Array exp(const Array& a) { return unary(a, false, [](const at::Tensor& x) { return x.exp(); }); }
Array log(const Array& a) { return unary(a, false, [](const at::Tensor& x) { return x.log(); }); }
Array tanh(const Array& a) { return unary(a, false, [](const at::Tensor& x) { return x.tanh(); }); }
Array relu(const Array& a) { return unary(a, false, [](const at::Tensor& x) { return x.relu(); }); }
Array gelu(const Array& a, bool approximate) {
  return unary(a, false, [approximate](const at::Tensor& x) {
    return torch::gelu(x, approximate ? "tanh" : "none");
  });
}
Array silu(const Array& a) {
  return unary(a, false, [](const at::Tensor& x) { return x * x.sigmoid(); });
}
Array sigmoid(const Array& a) {
  return unary(a, false, [](const at::Tensor& x) { return x.sigmoid(); });
}
Array square(const Array& a) {
  return unary(a, false, [](const at::Tensor& x) { return x * x; });
}
Array rsqrt(const Array& a) {
  return unary(a, false, [](const at::Tensor& x) { return x.rsqrt(); });
}

}  // namespace nnx
