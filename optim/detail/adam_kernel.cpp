#include <nnx/optim/detail/adam_kernel.h>

#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/full.h>

#include <atomic>
#include <cmath>
#include <vector>

namespace nnx::optim::detail {

namespace {

std::atomic<bool> on_cpu{false};
std::atomic<int64_t> steps_run{0};

const at::Tensor& tensor_at(const State& s, size_t i) {
  return (s.begin() + static_cast<std::ptrdiff_t>(i))->second.tensor();
}

// The kernel computes p -= lr_k / c1 * m / (sqrt(v) / sqrt(c2) + eps_k), with c = 1 - b^step in
// float64, and decays p *= 1 - lr_k * wd_k. optax computes p -= lr * (m * r1) / (sqrt(v * r2) +
// eps) and p -= lr * wd * p, with r = 1 / (1 - b^step) in the parameters' dtype: in float32,
// sqrt(r2) is 6e-6 to 1e-5 off for b2 = 0.999 in the first steps. These rates make the kernel's
// step optax's:
// lr_k = lr * r1 * c1 / (sqrt(r2) * sqrt(c2)), eps_k = eps / (sqrt(r2) * sqrt(c2)),
// wd_k = wd * lr / lr_k.
struct KernelRates {
  double learning_rate, eps, weight_decay;
};

KernelRates kernel_rates(const AdamKernelPlan& plan, at::ScalarType dtype) {
  const bool single = dtype == at::kFloat;
  const double r1 = single ? bias_reciprocal<float>(plan.b1, plan.step)
                           : bias_reciprocal<double>(plan.b1, plan.step);
  const double r2 = single ? bias_reciprocal<float>(plan.b2, plan.step)
                           : bias_reciprocal<double>(plan.b2, plan.step);
  const double c1 = 1 - std::pow(plan.b1, static_cast<double>(plan.step));
  const double c2 = 1 - std::pow(plan.b2, static_cast<double>(plan.step));
  const double root = std::sqrt(r2) * std::sqrt(c2);
  KernelRates rates{plan.learning_rate * r1 * c1 / root, plan.eps / root, 0.0};
  if (rates.learning_rate != 0)
    rates.weight_decay = plan.weight_decay * plan.learning_rate / rates.learning_rate;
  return rates;
}

}  // namespace

void set_adam_kernel_on_cpu(bool on) { on_cpu = on; }
int64_t adam_kernel_steps() { return steps_run.load(); }

bool adam_kernel_applies(const State& updates, const State& params) {
  if (params.size() == 0 || updates.size() != params.size()) return false;
  const at::Tensor& first = tensor_at(params, 0);
  const auto dtype = first.scalar_type();
  if ((dtype != at::kFloat && dtype != at::kDouble) ||
      !(first.is_cuda() || (first.device().is_cpu() && on_cpu.load())))
    return false;
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = tensor_at(params, i);
    const at::Tensor& g = tensor_at(updates, i);
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
    g[group].push_back(tensor_at(updates, i).contiguous());
    m[group].push_back((*plan.mu)[i]);
    v[group].push_back((*plan.nu)[i]);
    ++i;
  }
  // The kernel reads the step count (already advanced) from a float tensor per parameter.
  const at::Tensor step = at::full({}, static_cast<double>(plan.step),
                                   tensor_at(params, 0).options().dtype(at::kFloat));
  const KernelRates rates = kernel_rates(plan, tensor_at(params, 0).scalar_type());
  for (int group = 0; group < 2; ++group) {
    if (p[group].empty()) continue;
    const std::vector<at::Tensor> steps(p[group].size(), step);
    at::_fused_adamw_(p[group], g[group], m[group], v[group], {}, steps, rates.learning_rate,
                      plan.b1, plan.b2, group == 1 ? rates.weight_decay : 0.0, rates.eps,
                      /*amsgrad=*/false, /*maximize=*/false);
  }
  stage.finish();  // the moments' versions, the step counters
  ++steps_run;
  return true;
}

}  // namespace nnx::optim::detail
