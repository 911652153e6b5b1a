// Contractions: checks shapes, runs plan_matmul's plan (its rule table is in op_rules.cpp).
#include <nnx/core/error.h>
#include <nnx/sharding/astype.h>
#include <nnx/sharding/op_plan.h>
#include <nnx/sharding/ops.h>
#include <nnx/sharding/detail/ops_common.h>
#include <nnx/sharding/detail/plan_cache.h>

#include <torch/types.h>

#include <algorithm>
#include <optional>
#include <vector>

namespace nnx {

using namespace detail;

namespace {

// CPU BLAS multiplies by a row-major right operand with few columns (2 to 11) up to 5x slower than
// by its transpose (measured at batch 32 to 1024), in the GEMM and in the kernel's gradient alike.
constexpr int64_t kNarrowColumns = 12;
// Below this many rows of x the GEMM is too small for the order to matter; keep w as it is.
constexpr int64_t kMinRows = 12;

// The right operand of x @ w, column-major where w is narrow: autograd then computes w's
// gradient as (g^T x)^T, the fast orientation too. Costs one copy of w, which is small.
at::Tensor gemm_right_operand(const at::Tensor& x, const at::Tensor& w) {
  const bool narrow = w.dim() == 2 && w.size(1) > 1 && w.size(1) < kNarrowColumns &&
                      w.is_cpu() && w.is_floating_point() && w.is_contiguous() &&
                      x.numel() >= kMinRows * x.size(-1);
  return narrow ? w.t().contiguous().t() : w;
}

// The operands jnp.matmul takes and LibTorch's matmul does not, adapted: two dtypes meet in their
// promoted one; bools give whether any product is true (a sum of 0s and 1s in float32, nonzero
// exactly then, on any device); a vector is a row on the left, a column on the right, its dim
// removed from the result.
Array adapted_matmul(const Array& a0, const Array& b0) {
  const at::ScalarType type = at::promote_types(a0.dtype(), b0.dtype());
  if (type == at::kBool)
    return not_equal(matmul(astype(a0, at::kFloat), astype(b0, at::kFloat)), 0.0);
  if (a0.dtype() != type || b0.dtype() != type) return matmul(astype(a0, type), astype(b0, type));
  // Errors name matmul and the shapes given, not this helper and the reshaped ones.
  if (a0.ndim() == 0 || b0.ndim() == 0)
    throw_error("matmul", fmt::format("needs arrays of rank >= 1, got {} and {}", shape_str(a0),
                                      shape_str(b0)));
  const int64_t k = a0.shape().back(), k_b = b0.shape()[std::max<int64_t>(b0.ndim() - 2, 0)];
  if (k != k_b)
    throw_error("matmul", fmt::format("inner dims differ: {} @ {} ({} vs {})", shape_str(a0),
                                      shape_str(b0), k, k_b));
  const Array a = a0.ndim() == 1 ? reshape(a0, {1, a0.shape()[0]}) : a0;
  const Array b = b0.ndim() == 1 ? reshape(b0, {b0.shape()[0], 1}) : b0;
  const Array y = matmul(a, b);
  Shape shape = y.shape();
  if (b0.ndim() == 1) shape.pop_back();
  if (a0.ndim() == 1) shape.erase(shape.end() - (b0.ndim() == 1 ? 1 : 2));
  return reshape(y, shape);
}

}  // namespace

Array matmul(const Array& a0, const Array& b0) {
  const at::ScalarType type = a0.dtype();
  if (type != b0.dtype() || type == at::kBool || a0.ndim() == 1 || b0.ndim() == 1)
    return adapted_matmul(a0, b0);
  NNX_CHECK(a0.ndim() >= 2 && b0.ndim() >= 2,
            "needs arrays of rank >= 1, got {} and {}", shape_str(a0), shape_str(b0));
  const int64_t k = a0.shape().back();
  NNX_CHECK(b0.shape()[b0.ndim() - 2] == k,
            "inner dims differ: {} @ {} ({} vs {})", shape_str(a0), shape_str(b0), k,
            b0.shape()[b0.ndim() - 2]);
  const auto& mesh = common_mesh({&a0, &b0}, "matmul");
  const bool replicated = all_replicated({&a0, &b0});
  if (!mesh || replicated) {
    // Batch dims broadcast (the planner checks this on the sharded path).
    const int64_t batch_a = a0.ndim() - 2, batch_b = b0.ndim() - 2;
    for (int64_t i = 0; i < std::min(batch_a, batch_b); ++i) {
      int64_t da = a0.shape()[batch_a - 1 - i], db = b0.shape()[batch_b - 1 - i];
      NNX_CHECK(da == db || da == 1 || db == 1, "batch dims of {} and {} do not broadcast",
                shape_str(a0), shape_str(b0));
    }
    const at::Tensor a = local_on_mesh(a0, mesh), b = local_on_mesh(b0, mesh);
    at::Tensor local = torch::matmul(a, gemm_right_operand(a, b));
    if (!mesh) return Array(std::move(local));
    return replicated_result(std::move(local), mesh, {&a0, &b0});
  }
  std::optional<Array> held_a, held_b;
  const Array& a = on_mesh(a0, mesh, held_a);
  const Array& b = on_mesh(b0, mesh, held_b);
  const SharedPlan plan = cached_plan("matmul", 0, {&a, &b}, [&] {
    return plan_matmul(layout_of(a), layout_of(b));
  });
  std::optional<at::Tensor> moved_a, moved_b;
  const at::Tensor& la = planned_local(a, *plan, 0, moved_a);
  const at::Tensor& lb = planned_local(b, *plan, 1, moved_b);
  return planned_result(torch::matmul(la, gemm_right_operand(la, lb)), mesh, *plan);
}

namespace {

bool same_dtype_and_device(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  return x.scalar_type() == w.scalar_type() && bias.scalar_type() == w.scalar_type() &&
         x.device() == w.device() && bias.device() == w.device();
}

bool gemm_takes_bias(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  return w.dim() == 2 && w.scalar_type() != at::kBool && x.dim() >= 2 && bias.dim() == 1 &&
         bias.size(0) == w.size(1) && same_dtype_and_device(x, w, bias);
}

// x @ w + bias as one addmm (the bias is the GEMM's initial output, as torch::nn::Linear does),
// where the blocks fit; otherwise nullopt.

std::optional<at::Tensor> add_bias_in_gemm(const at::Tensor& x, const at::Tensor& w,
                                           const at::Tensor& bias) {
  if (!gemm_takes_bias(x, w, bias)) return std::nullopt;
  if (x.dim() == 2) return at::addmm(bias, x, gemm_right_operand(x, w));
  std::vector<int64_t> out_sizes = x.sizes().vec();
  out_sizes.back() = w.size(1);
  return at::addmm(bias, x.reshape({-1, x.size(-1)}), gemm_right_operand(x, w)).view(out_sizes);
}

// linear in one addmm, or nullopt where the bias is added as a separate op.
std::optional<Array> fused_linear(const Array& x, const Array& w, const Array& bias) {
  if (x.ndim() < 2 || w.ndim() != 2 || bias.ndim() != 1 || w.dtype() == at::kBool ||
      x.shape().back() != w.shape()[0] || bias.shape()[0] != w.shape()[1] ||
      !bias.partial_axes().empty())
    return std::nullopt;
  const auto& mesh = common_mesh({&x, &w, &bias}, "linear");
  if (!mesh) {
    auto local = add_bias_in_gemm(x.local(), w.local(), bias.local());
    if (!local) return std::nullopt;
    return Array(std::move(*local));
  }
  if (all_replicated({&x, &w, &bias})) {
    auto local = add_bias_in_gemm(local_on_mesh(x, mesh), local_on_mesh(w, mesh),
                                  local_on_mesh(bias, mesh));
    if (!local) return std::nullopt;
    return replicated_result(std::move(*local), mesh, {&x});
  }
  std::optional<Array> held_a, held_b, held_c;
  const Array& a = on_mesh(x, mesh, held_a);
  const Array& b = on_mesh(w, mesh, held_b);
  const Array& c = on_mesh(bias, mesh, held_c);
  const SharedPlan plan = cached_plan("matmul", 0, {&a, &b}, [&] {
    return plan_matmul(layout_of(a), layout_of(b));
  });
  const Layout& out = plan->plan.output;
  // The bias's block must be the output block's last dim, with no pending sums on either.
  if (!out.partial.empty() || dims_of(c)[0] != out.dims.back() ||
      !same_dtype_and_device(a.local(), b.local(), c.local()))
    return std::nullopt;
  std::optional<at::Tensor> moved_a, moved_b;
  const at::Tensor& la = planned_local(a, *plan, 0, moved_a);
  const at::Tensor& lb = planned_local(b, *plan, 1, moved_b);
  auto local = add_bias_in_gemm(la, lb, c.local());
  if (!local) return std::nullopt;
  return planned_result(std::move(*local), mesh, *plan);
}

}  // namespace

Array linear(const Array& x, const Array& weight, const std::optional<Array>& bias) {
  if (bias) {
    if (auto fused = fused_linear(x, weight, *bias)) return std::move(*fused);
    return add(matmul(x, weight), *bias);
  }
  return matmul(x, weight);
}

}  // namespace nnx
