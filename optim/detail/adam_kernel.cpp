#include <nnx/optim/detail/adam_kernel.h>

#include <ATen/ops/_foreach_div.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/full.h>

#include <atomic>
#include <cmath>
#include <vector>

namespace nnx::optim::detail {

namespace {

std::atomic<bool> on_cpu{false};
std::atomic<int64_t> steps_run{0};

// The kernel computes p -= lr_k / c1 * m / (sqrt(v) / sqrt(c2) + eps_k), c = 1 - b^step, and
// decays p *= 1 - lr_k * wd_k; optax computes p -= lr * (m * r1) / (sqrt(v * r2) + eps) and
// p -= lr * wd * p, with r = 1 / (1 - b^step) in the parameters' dtype (in float32, sqrt(r2) is
// 6e-6 to 1e-5 off for b2 = 0.999 in the first steps). The kernel is given step 1, so that its
// c = 1 - b is exact, and these rates make its step optax's:
// lr_k = lr * r1 * c1 / root, eps_k = eps / root, root = sqrt(r2) * sqrt(c2) / sqrt(s), and
// wd_k = wd * lr / lr_k. s scales the second moment while the kernel holds it (below).
struct KernelRates {
  double learning_rate, eps, weight_decay;
  double nu_scale;  // 1, or s: v enters the kernel as s * v and leaves divided by s
};

// On CUDA float32 tensors the kernel's scalars are float32: its second moment takes
// (1 - b2) in float32, 1.3e-5 (relative) off optax's float32(1 - b2) for b2 = 0.999. The second
// moment scaled by s = (1 - b2 in float32) / float32(1 - b2) while in the kernel makes its
// update optax's: s * v' = b2 * s * v + (1 - b2 in float32) * g^2. Elsewhere the scalars are
// float64, within rounding of optax's.
KernelRates kernel_rates(const AdamKernelPlan& plan, at::ScalarType dtype, bool float_scalars) {
  const bool single = dtype == at::kFloat;
  const double r1 = single ? bias_reciprocal<float>(plan.b1, plan.step)
                           : bias_reciprocal<double>(plan.b1, plan.step);
  const double r2 = single ? bias_reciprocal<float>(plan.b2, plan.step)
                           : bias_reciprocal<double>(plan.b2, plan.step);
  double c1 = 1 - plan.b1, c2 = 1 - plan.b2, nu_scale = 1;
  if (float_scalars) {
    c1 = 1.0f - static_cast<float>(plan.b1);
    c2 = 1.0f - static_cast<float>(plan.b2);
    nu_scale = static_cast<float>(c2 / static_cast<double>(static_cast<float>(1 - plan.b2)));
  }
  const double root = std::sqrt(r2) * std::sqrt(c2) / std::sqrt(nu_scale);
  KernelRates rates{plan.learning_rate * r1 * c1 / root, plan.eps / root, 0.0, nu_scale};
  if (rates.learning_rate != 0)
    rates.weight_decay = plan.weight_decay * plan.learning_rate / rates.learning_rate;
  return rates;
}

}  // namespace

void set_adam_kernel_on_cpu(bool on) { on_cpu = on; }
int64_t adam_kernel_steps() { return steps_run.load(); }

bool adam_kernel_applies(const State& updates, const State& params) {
  if (params.size() == 0 || updates.size() != params.size()) return false;
  const at::Tensor& first = state_entry(params, 0).tensor();
  const auto dtype = first.scalar_type();
  if ((dtype != at::kFloat && dtype != at::kDouble) ||
      !(first.is_cuda() || (first.device().is_cpu() && on_cpu.load())))
    return false;
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = state_entry(params, i).tensor();
    const at::Tensor& g = state_entry(updates, i).tensor();
    if (p.scalar_type() != dtype || g.scalar_type() != dtype || p.device() != first.device() ||
        g.device() != first.device() || !p.is_contiguous() || g.sizes() != p.sizes())
      return false;
  }
  return true;
}

bool run_adam_kernel(FusedStage& stage, State& params, const State& updates) {
  AdamKernelPlan plan;
  if (!stage.add_to(plan) || plan.mu == nullptr || !plan.scaled) return false;
  stage.prepare();
  // Two groups: the parameters weight decay selects, and the others.
  std::vector<at::Tensor> p[2], g[2], m[2], v[2];
  size_t i = 0;
  for (auto& [path, variable] : params) {
    const int group = !plan.decayed.empty() && plan.decayed[i] ? 1 : 0;
    p[group].push_back(variable.tensor());
    g[group].push_back(state_entry(updates, i).tensor().contiguous());
    m[group].push_back((*plan.mu)[i]);
    v[group].push_back((*plan.nu)[i]);
    ++i;
  }
  // The kernel reads a step count from a float tensor per parameter: 1, with the bias
  // corrections of the real step folded into the rates.
  const at::Tensor& first = state_entry(params, 0).tensor();
  const at::Tensor step = at::full({}, 1.0, first.options().dtype(at::kFloat));
  const KernelRates rates =
      kernel_rates(plan, first.scalar_type(), first.is_cuda() && first.scalar_type() == at::kFloat);
  for (int group = 0; group < 2; ++group) {
    if (p[group].empty()) continue;
    const std::vector<at::Tensor> steps(p[group].size(), step);
    if (rates.nu_scale != 1) at::_foreach_mul_(v[group], rates.nu_scale);
    at::_fused_adamw_(p[group], g[group], m[group], v[group], {}, steps, rates.learning_rate,
                      plan.b1, plan.b2, group == 1 ? rates.weight_decay : 0.0, rates.eps,
                      /*amsgrad=*/false, /*maximize=*/false);
    if (rates.nu_scale != 1) at::_foreach_div_(v[group], rates.nu_scale);
  }
  stage.finish();  // the moments' versions, the step counters
  ++steps_run;
  return true;
}

}  // namespace nnx::optim::detail
