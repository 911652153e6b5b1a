#include <nnx/sharding/detail/exact_gelu.h>

#include <nnx/sharding/detail/chunked_passes.h>

#include <torch/types.h>

#include <cmath>
#include <numbers>

namespace nnx::detail {

namespace {

constexpr double kMinusSqrtHalf = -std::numbers::sqrt2 / 2;
const double kErfcSlope = -2 / std::sqrt(std::numbers::pi);  // erfc'(0), as LibTorch's formula

// The constants as 0-d double tensors: LibTorch's mul_ by a Scalar first rounds it to the
// tensor's dtype (in bfloat16, -2/sqrt(pi) becomes -1.125); x * s and a product by these do not.
struct Constants {
  at::Tensor half, minus_sqrt_half, slope;
};
const Constants& constants() {
  auto unrounded = [](double s) { return at::scalar_tensor(s, at::kDouble); };
  static const auto* held =
      new Constants{unrounded(0.5), unrounded(kMinusSqrtHalf), unrounded(kErfcSlope)};
  return *held;
}

struct ExactGelu {
  // (x/2) erfc(-x/sqrt(2)), in JAX's order of ops.
  static at::Tensor values(const at::Tensor& x) {
    const auto& [half, minus_sqrt_half, slope] = constants();
    return chunkwise(x, [&](at::Tensor& out, const at::Tensor& xs) {
      at::Tensor tail = at::mul(xs, minus_sqrt_half);
      at::mul_out(out, xs, half).mul_(tail.erfc_());
    });
  }
  // The composite's two paths to x, as LibTorch's derivative formulas round them: through x/2
  // (the cotangent times erfc(u), halved) and through erfc (-2/sqrt(pi) exp(-u^2) times the
  // cotangent times x/2, then times -1/sqrt(2)); u = -x/sqrt(2). Products commute exactly.
  static at::Tensor gradient(const at::Tensor& x, const at::Tensor& grad) {
    const auto& [half, minus_sqrt_half, slope] = constants();
    return chunkwise(
        x,
        [&](at::Tensor& out, const at::Tensor& xs, const at::Tensor& grads) {
          at::Tensor through_erfc = at::mul(xs, minus_sqrt_half);
          at::erfc_out(out, through_erfc).mul_(grads).mul_(half);
          through_erfc.pow_(2).neg_().exp_().mul_(slope);
          at::Tensor scaled_grad = at::mul(xs, half).mul_(grads);
          out.add_(through_erfc.mul_(scaled_grad).mul_(minus_sqrt_half));
        },
        grad);
  }
  static at::Tensor differentiable_gradient(const at::Tensor& x, const at::Tensor& grad) {
    const at::Tensor u = x * kMinusSqrtHalf;
    const at::Tensor through_half = (grad * at::erfc(u)) * 0.5;
    const at::Tensor through_erfc = (kErfcSlope * at::exp(-u.pow(2))) * (grad * (x * 0.5));
    return through_half + through_erfc * kMinusSqrtHalf;
  }
};

}  // namespace

at::Tensor exact_gelu(const at::Tensor& x) { return apply_elementwise<ExactGelu>(x); }

}  // namespace nnx::detail
