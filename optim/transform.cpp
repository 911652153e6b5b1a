// Gradient transformations: local math on each parameter's block; only global_norm talks.
#include <nnx/core/error.h>
#include <nnx/optim/detail/fused_stage.h>
#include <nnx/optim/transform.h>
#include <nnx/sharding/ops.h>
#include <nnx/sharding/redistribute.h>

#include <torch/types.h>
#include <torch/utils.h>

#include <cmath>
#include <optional>
#include <vector>

namespace nnx::optim {

namespace {

Variable& entry(State& s, size_t i) { return (s.begin() + static_cast<std::ptrdiff_t>(i))->second; }
const Variable& entry(const State& s, size_t i) {
  return (s.begin() + static_cast<std::ptrdiff_t>(i))->second;
}
const at::Tensor& local(const State& s, size_t i) { return entry(s, i).tensor(); }
void set_local(State& s, size_t i, at::Tensor t) {
  auto& v = entry(s, i);
  v.set_value(v.value().with_local(std::move(t)));
}

// A slot per parameter: OptState variables shaped, sharded and annotated as the parameter.
State slot_like(const State& params, double fill) {
  State out;
  for (const auto& [path, p] : params)
    out.add(path, OptState(p.value().with_local(torch::full_like(p.tensor().detach(), fill)),
                           p.metadata()));
  return out;
}

void check_aligned(const State& updates, const State& params, const char* who) {
  if (updates.size() != params.size())
    nnx::detail::throw_error(who, fmt::format("{} updates for {} parameters; pass the gradients of "
                                         "exactly the optimized parameters",
                                         updates.size(), params.size()));
  size_t i = 0;
  for (const auto& [path, u] : updates) {
    const auto& p = (params.begin() + static_cast<std::ptrdiff_t>(i++))->first;
    if (p != path)
      nnx::detail::throw_error(who, fmt::format("update '{}' where parameter '{}' was expected", path, p));
  }
}

// Throws unless `state` holds `slots` slots laid out as `params` (paths and shapes), as the state
// this transformation's init made for these parameters does.
void check_state(const TxState& state, size_t slots, const State& params, const char* who) {
  auto fail = [&](const std::string& what) {
    nnx::detail::throw_error(who, fmt::format("{}; pass the state that this transformation's "
                                              "init made for these parameters", what));
  };
  if (state.slots.size() != slots)
    fail(fmt::format("the state holds {} slots where {} were expected", state.slots.size(), slots));
  for (size_t k = 0; k < slots; ++k) {
    const State& slot = state.slots[k];
    const std::string name = k < state.slot_names.size() ? state.slot_names[k] : "";
    if (slot.size() != params.size())
      fail(fmt::format("its slot '{}' holds {} variables for {} parameters", name, slot.size(),
                       params.size()));
    size_t i = 0;
    for (const auto& [path, p] : params) {
      const auto& [slot_path, v] = *(slot.begin() + static_cast<std::ptrdiff_t>(i++));
      if (slot_path != path || v.value().shape() != p.value().shape())
        fail(fmt::format("its slot '{}' holds '{}' of shape ({}) where parameter '{}' of shape "
                         "({}) was expected", name, slot_path, fmt::join(v.value().shape(), ", "),
                         path, fmt::join(p.value().shape(), ", ")));
    }
  }
}

// A scalar as JAX applies it to an array of `like`'s dtype: rounded to that dtype. LibTorch
// would keep it in float for bfloat16 and float16 arrays (and round only added ones), so the
// transformations round it themselves: their values are then optax's in those dtypes too.
double scalar_for(double s, const at::Tensor& like) {
  switch (like.scalar_type()) {
    case at::kBFloat16: return static_cast<float>(c10::BFloat16(static_cast<float>(s)));
    case at::kHalf: return static_cast<float>(c10::Half(static_cast<float>(s)));
    default: return s;
  }
}

// A moment divided by Adam's bias correction as optax's values on the CPU have it (XLA's
// division of an array by a scalar; bias_correction in fused_stage.h): times its reciprocal in
// float32 and float64, divided by the correction rounded to bfloat16, times the float16
// reciprocal in float16. LibTorch's CUDA ops divide by a scalar as a product with its float
// reciprocal.
at::Tensor bias_corrected(const at::Tensor& moment, double decay, int64_t step) {
  switch (moment.scalar_type()) {
    case at::kDouble: return moment * detail::bias_reciprocal<double>(decay, step);
    case at::kFloat: return moment * detail::bias_reciprocal<float>(decay, step);
    case at::kHalf: {
      const double correction = scalar_for(detail::bias_correction<float>(decay, step), moment);
      return moment * scalar_for(1.0f / static_cast<float>(correction), moment);
    }
    default: return moment / scalar_for(detail::bias_correction<float>(decay, step), moment);
  }
}

// 1 / sqrt(x) computed in float and rounded once to x's dtype, which gives optax's bfloat16 and
// float16 values on the comparison's cases. LibTorch's CPU rsqrt on such blocks rounds the root
// first for some elements (those past its vectorized loop); its CUDA rsqrt rounds once.
at::Tensor rsqrt_rounded_once(const at::Tensor& x) {
  const auto dtype = x.scalar_type();
  if (!x.is_cpu() || (dtype != at::kBFloat16 && dtype != at::kHalf)) return x.rsqrt();
  return x.to(at::kFloat).rsqrt().to(dtype);
}

// A step counter: an OptState int64 scalar, so that checkpoints hold it with the moments.
Variable step_counter() { return OptState(torch::zeros({}, torch::kLong)); }
int64_t state_count(const TxState& s) {
  NNX_CHECK(s.count.defined(), "the transformation's state has no step count; pass the state "
            "that its init made");
  return s.count.tensor().item<int64_t>();
}
void set_state_count(TxState& s, int64_t n) {
  s.count.set_value(Array(torch::full({}, n, torch::kLong)));
}

GradientTransformation stateless(
    std::function<void(State&, TxState&, const State&)> update,
    std::function<std::shared_ptr<FusedStage>(TxState&, const FusedInputs&)> fused) {
  return {[](const State&) { return TxState{}; }, std::move(update), std::move(fused)};
}

}  // namespace

State TxState::variables(const std::string& prefix) const {
  NNX_CHECK(slot_names.size() == slots.size(),
            "a transformation state has {} slots but {} slot names; name each slot", slots.size(),
            slot_names.size());
  State out;
  if (count.defined()) out.add(prefix + "count", count);
  for (size_t k = 0; k < slots.size(); ++k)
    for (const auto& [path, v] : slots[k]) out.add(prefix + slot_names[k] + "." + path, v);
  for (size_t k = 0; k < inner.size(); ++k)
    for (const auto& [path, v] : inner[k].variables(prefix + std::to_string(k) + "."))
      out.add(path, v);
  return out;
}

GradientTransformation chain(std::vector<GradientTransformation> transforms) {
  return {[transforms](const State& params) {
            TxState s;
            for (const auto& t : transforms) s.inner.push_back(t.init(params));
            return s;
          },
          [transforms](State& updates, TxState& state, const State& params) {
            if (state.inner.size() != transforms.size())
              nnx::detail::throw_error("chain", fmt::format(
                  "the state holds {} inner states for {} transformations; pass the state that "
                  "the chain's init made", state.inner.size(), transforms.size()));
            for (size_t k = 0; k < transforms.size(); ++k)
              transforms[k].update(updates, state.inner[k], params);
          },
          [transforms](TxState& state, const FusedInputs& in) -> std::shared_ptr<FusedStage> {
            std::vector<std::shared_ptr<FusedStage>> stages;
            for (size_t k = 0; k < transforms.size(); ++k) {
              if (!transforms[k].fused) return nullptr;
              FusedInputs part{in.updates, in.params, in.sees_gradients && k == 0};
              auto stage = transforms[k].fused(state.inner[k], part);
              if (!stage) return nullptr;  // a part that cannot run fused: the whole takes update
              stages.push_back(std::move(stage));
            }
            return detail::chain_stage(std::move(stages));
          }};
}

GradientTransformation scale(double step_size) {
  return stateless([step_size](State& u, TxState&, const State&) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < u.size(); ++i)
      set_local(u, i, local(u, i) * scalar_for(step_size, local(u, i)));
  }, [step_size](TxState&, const FusedInputs&) { return detail::scale_stage(step_size, nullptr); });
}

GradientTransformation scale_by_schedule(Schedule schedule) {
  NNX_CHECK(schedule, "the schedule is empty; pass a function of the step, such as "
            "optim::cosine_decay_schedule(...)");
  return {[](const State&) { return TxState{step_counter(), {}, {}, {}}; },
          [schedule](State& u, TxState& state, const State&) {
            torch::NoGradGuard no_grad;
            const int64_t count = state_count(state);
            double factor = schedule(count);
            for (size_t i = 0; i < u.size(); ++i)
              set_local(u, i, local(u, i) * scalar_for(factor, local(u, i)));
            set_state_count(state, count + 1);
          },
          [schedule](TxState& state, const FusedInputs&) {
            return detail::scale_stage(schedule(state_count(state)), &state.count);
          }};
}

GradientTransformation scale_by_learning_rate(LearningRate learning_rate) {
  if (auto* lr = std::get_if<double>(&learning_rate)) return scale(-*lr);
  auto schedule = std::get<Schedule>(learning_rate);
  NNX_CHECK(schedule, "the learning rate is an empty schedule; pass a number or a function of "
            "the step, such as optim::cosine_decay_schedule(...)");
  return scale_by_schedule([schedule](int64_t step) { return -schedule(step); });
}

GradientTransformation trace(double decay, bool nesterov) {
  return {[](const State& params) { return TxState{{}, {"trace"}, {slot_like(params, 0)}, {}}; },
          [decay, nesterov](State& u, TxState& state, const State& params) {
            torch::NoGradGuard no_grad;
            check_aligned(u, params, "trace");
            check_state(state, 1, params, "trace");
            for (size_t i = 0; i < u.size(); ++i) {
              const at::Tensor& t0 = local(state.slots[0], i);
              at::Tensor t = local(u, i) + scalar_for(decay, t0) * t0;
              set_local(state.slots[0], i, t);
              set_local(u, i, nesterov ? local(u, i) + scalar_for(decay, t) * t : t);
            }
          },
          [decay, nesterov](TxState& state, const FusedInputs&) {
            return detail::trace_stage(state.slots[0], decay, nesterov);
          }};
}

GradientTransformation scale_by_adam(double b1, double b2, double eps, double eps_root) {
  return {[](const State& params) {
            return TxState{step_counter(), {"mu", "nu"},
                           {slot_like(params, 0), slot_like(params, 0)}, {}};
          },
          [=](State& u, TxState& state, const State& params) {
            torch::NoGradGuard no_grad;
            check_aligned(u, params, "scale_by_adam");
            check_state(state, 2, params, "scale_by_adam");
            const int64_t step = state_count(state) + 1;
            for (size_t i = 0; i < u.size(); ++i) {
              const at::Tensor& g = local(u, i);
              const at::Tensor& mu0 = local(state.slots[0], i);
              const at::Tensor& nu0 = local(state.slots[1], i);
              at::Tensor mu = scalar_for(1 - b1, g) * g + scalar_for(b1, mu0) * mu0;
              at::Tensor nu = scalar_for(1 - b2, g) * (g * g) + scalar_for(b2, nu0) * nu0;
              set_local(state.slots[0], i, mu);
              set_local(state.slots[1], i, nu);
              const at::Tensor root = (bias_corrected(nu, b2, step) + scalar_for(eps_root, nu)).sqrt();
              set_local(u, i, bias_corrected(mu, b1, step) / (root + scalar_for(eps, root)));
            }
            set_state_count(state, step);
          },
          [=](TxState& state, const FusedInputs&) {
            return detail::adam_stage(state.slots[0], state.slots[1], state.count, b1, b2, eps,
                                      eps_root);
          }};
}

GradientTransformation scale_by_rms(double decay, double eps, double initial_scale) {
  return {[initial_scale](const State& params) {
            return TxState{{}, {"nu"}, {slot_like(params, initial_scale)}, {}};
          },
          [=](State& u, TxState& state, const State& params) {
            torch::NoGradGuard no_grad;
            check_aligned(u, params, "scale_by_rms");
            check_state(state, 1, params, "scale_by_rms");
            for (size_t i = 0; i < u.size(); ++i) {
              const at::Tensor& g = local(u, i);
              const at::Tensor& nu0 = local(state.slots[0], i);
              at::Tensor nu = scalar_for(1 - decay, g) * (g * g) + scalar_for(decay, nu0) * nu0;
              set_local(state.slots[0], i, nu);
              set_local(u, i, g * rsqrt_rounded_once(nu + scalar_for(eps, nu)));
            }
          },
          [=](TxState& state, const FusedInputs&) {
            return detail::rms_stage(state.slots[0], decay, eps);
          }};
}

GradientTransformation scale_by_lion(double b1, double b2) {
  return {[](const State& params) { return TxState{{}, {"mu"}, {slot_like(params, 0)}, {}}; },
          [=](State& u, TxState& state, const State& params) {
            torch::NoGradGuard no_grad;
            check_aligned(u, params, "scale_by_lion");
            check_state(state, 1, params, "scale_by_lion");
            for (size_t i = 0; i < u.size(); ++i) {
              const at::Tensor g = local(u, i);
              const at::Tensor& mu = local(state.slots[0], i);
              set_local(u, i, (scalar_for(1 - b1, g) * g + scalar_for(b1, mu) * mu).sign());
              set_local(state.slots[0], i, scalar_for(1 - b2, g) * g + scalar_for(b2, mu) * mu);
            }
          },
          [=](TxState& state, const FusedInputs&) {
            return detail::lion_stage(state.slots[0], b1, b2);
          }};
}

GradientTransformation add_decayed_weights(double weight_decay, std::optional<Filter> mask) {
  return stateless([weight_decay, mask](State& u, TxState&, const State& params) {
    torch::NoGradGuard no_grad;
    check_aligned(u, params, "add_decayed_weights");
    for (size_t i = 0; i < u.size(); ++i) {
      const auto& [path, p] = *(params.begin() + static_cast<std::ptrdiff_t>(i));
      if (mask && !(*mask)(path, p)) continue;
      set_local(u, i, local(u, i) + scalar_for(weight_decay, p.tensor()) * p.tensor());
    }
  }, [weight_decay, mask](TxState&, const FusedInputs& in) {
    std::vector<bool> selected;
    for (const auto& [path, p] : in.params) selected.push_back(!mask || (*mask)(path, p));
    return detail::decay_stage(weight_decay, std::move(selected));
  });
}

namespace {

// Squares held at once by the GPU path: groups of blocks of about this many bytes.
constexpr int64_t kSquaresBytes = 64 * 1024 * 1024;

// Each block's sum of squares, or nothing where the blocks are not all whole (no mesh, or
// replicated), of one floating dtype, on one CUDA device: there two multi-tensor launches per
// group of blocks (their squares, then the squares' sums) rather than three launches per block.
// Empty blocks are left out (their sum is zero).
std::optional<at::Tensor> sums_of_squares_on_one_gpu(const State& tree) {
  std::vector<at::Tensor> blocks;
  for (const auto& [path, v] : tree) {
    const at::Tensor& t = v.tensor();
    if (!t.is_cuda() || !t.is_floating_point() || !v.value().is_fully_replicated() ||
        (!blocks.empty() && (t.device() != blocks[0].device() ||
                             t.scalar_type() != blocks[0].scalar_type())))
      return std::nullopt;
    if (t.numel() > 0) blocks.push_back(t);
  }
  if (blocks.empty()) return std::nullopt;
  std::vector<at::Tensor> sums;
  for (size_t first = 0; first < blocks.size();) {
    size_t end = first;
    int64_t bytes = 0;
    while (end < blocks.size() && (end == first || bytes + blocks[end].nbytes() <= kSquaresBytes))
      bytes += static_cast<int64_t>(blocks[end++].nbytes());
    const std::vector<at::Tensor> group(blocks.begin() + first, blocks.begin() + end);
    // Squares are not negative: their 1-norm is their sum.
    for (auto& sum : at::_foreach_norm(at::_foreach_mul(group, group), 1)) sums.push_back(sum);
    first = end;
  }
  return at::stack(sums).to(at::kDouble);
}

// Each variable's sum of squares, through the sharded ops (a sharded block's sum is completed
// across its mesh), left on its device.
at::Tensor sums_of_squares(const State& tree) {
  std::vector<at::Tensor> sums;
  for (const auto& [path, v] : tree) {
    at::Tensor sum = nnx::gather(nnx::sum(nnx::square(v.value()))).reshape({1});
    sums.push_back(sum.to(sums.empty() ? sum.device() : sums.front().device(), at::kDouble));
  }
  return sums.empty() ? at::zeros({0}, at::kDouble) : at::cat(sums);
}

}  // namespace

double global_norm(const State& tree) {
  torch::NoGradGuard no_grad;
  // The sums stay on their device until all are taken: one wait, not one per variable. They
  // add up in double, in state order.
  auto on_gpu = sums_of_squares_on_one_gpu(tree);
  const at::Tensor sums = (on_gpu ? *on_gpu : sums_of_squares(tree)).cpu();
  double total = 0;
  for (int64_t i = 0; i < sums.numel(); ++i) total += sums.data_ptr<double>()[i];
  return std::sqrt(total);
}

GradientTransformation clip_by_global_norm(double max_norm) {
  NNX_CHECK(max_norm > 0, "max_norm must be positive, got {}", max_norm);
  return stateless([max_norm](State& u, TxState&, const State&) {
    torch::NoGradGuard no_grad;
    const double norm = global_norm(u);
    if (norm < max_norm) return;
    for (size_t i = 0; i < u.size(); ++i) {
      const at::Tensor& t = local(u, i);
      set_local(u, i, t / scalar_for(norm, t) * scalar_for(max_norm, t));
    }
  }, [max_norm](TxState&, const FusedInputs& in) -> std::shared_ptr<FusedStage> {
    // Fused only when it clips the gradients themselves (its norm is taken before the pass).
    if (!in.sees_gradients) return nullptr;
    return detail::clip_stage(in.updates, max_norm);
  });
}

GradientTransformation sgd(LearningRate learning_rate, std::optional<double> momentum,
                           bool nesterov) {
  std::vector<GradientTransformation> parts;
  if (momentum) parts.push_back(trace(*momentum, nesterov));
  parts.push_back(scale_by_learning_rate(std::move(learning_rate)));
  return chain(std::move(parts));
}

GradientTransformation adam(LearningRate learning_rate, double b1, double b2, double eps) {
  return chain({scale_by_adam(b1, b2, eps), scale_by_learning_rate(std::move(learning_rate))});
}

GradientTransformation adamw(LearningRate learning_rate, double b1, double b2, double eps,
                             double weight_decay, std::optional<Filter> mask) {
  return chain({scale_by_adam(b1, b2, eps), add_decayed_weights(weight_decay, std::move(mask)),
                scale_by_learning_rate(std::move(learning_rate))});
}

GradientTransformation lion(LearningRate learning_rate, double b1, double b2, double weight_decay,
                            std::optional<Filter> mask) {
  return chain({scale_by_lion(b1, b2), add_decayed_weights(weight_decay, std::move(mask)),
                scale_by_learning_rate(std::move(learning_rate))});
}

GradientTransformation rmsprop(LearningRate learning_rate, double decay, double eps,
                               double initial_scale, std::optional<double> momentum,
                               bool nesterov) {
  std::vector<GradientTransformation> parts{scale_by_rms(decay, eps, initial_scale),
                                            scale_by_learning_rate(std::move(learning_rate))};
  if (momentum) parts.push_back(trace(*momentum, nesterov));
  return chain(std::move(parts));
}

}  // namespace nnx::optim
