// The per-element form of the built-in transformations. Optimizer::update chains their stages
// and runs the whole step (every transformation, then params += updates) in one pass over each
// local block, a few hundred elements at a time, with no temporaries. The arithmetic is that of
// each transformation's `update` (and of optax), operation for operation.
#pragma once

#include <nnx/framework/state.h>
#include <nnx/optim/detail/cuda/fused_step.h>
#include <nnx/optim/transform.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace nnx::optim {

// What a transformation's stage may read when it is built for one step.
struct FusedInputs {
  const State& updates;  // the gradients, in the parameters' order
  const State& params;
  bool sees_gradients;  // true when nothing runs before this stage (its input is `updates`)
};

// The i-th variable of `s`, in state order.
inline const Variable& state_entry(const State& s, size_t i) {
  return (s.begin() + static_cast<std::ptrdiff_t>(i))->second;
}

// A chain as one launch of nnx's CUDA step kernel (step_kernel.h): each stage appends its
// operation, in chain order, with its scalars rounded as its loop rounds them for float, double,
// bfloat16 and float16 blocks (the last two held in float), and its slot tensors (one per
// parameter each).
struct KernelOp {
  detail::cuda::StepKind kind;
  std::array<float, 8> single{};
  std::array<double, 8> wide{};
  std::array<float, 8> bfloat16{};
  std::array<float, 8> float16{};
  std::vector<const std::vector<at::Tensor>*> slots;
  const std::vector<bool>* selected = nullptr;  // weight decay: the parameters it applies to
};
struct KernelPlan {
  std::vector<KernelOp> ops;
  // Built before `prepare` for its shape alone: clipping appends its operation whatever the
  // norm turns out to be (so whether the kernel takes a chain does not change from step to step).
  bool shape_only = false;
};

class FusedStage {
 public:
  virtual ~FusedStage() = default;
  // Collectives the stage needs before the pass (the global norm of clipping), on every rank.
  virtual void prepare() {}
  // Rewrites u, the updates of elements [begin, begin + n) of parameter i, in place; p holds the
  // parameter's values there. Called from several threads at once, on disjoint ranges.
  virtual void apply(size_t i, int64_t begin, int64_t n, float* u, const float* p) const = 0;
  virtual void apply(size_t i, int64_t begin, int64_t n, double* u, const double* p) const = 0;
  // The same for bfloat16 blocks: u and p hold their values widened to float, and every
  // operation rounds to bfloat16, as each tensor op on such blocks does.
  virtual void apply_bfloat16(size_t i, int64_t begin, int64_t n, float* u, const float* p) const = 0;
  // The same for float16 blocks (where float16_lanes()); u and p are 32-byte aligned.
  virtual void apply_float16(size_t i, int64_t begin, int64_t n, float* u, const float* p) const = 0;
  // After every element: step counters advance.
  virtual void finish() {}
  // Whether its slots are laid out as `params` (dtype, size, device): slots made for other
  // parameters (a model cast after its optimizer was made) take the transformations' `update`.
  virtual bool fits(const State& params) const { return true; }
  // Adds this stage to `plan` (after `prepare`, unless the plan is `shape_only`); false where
  // the kernel cannot do what it does.
  virtual bool add_to(KernelPlan&) const { return false; }
};

namespace detail {

// Adam's bias correction 1 - decay^step as optax computes it (in float for float32 and
// reduced moments, in double for float64). Moments are corrected as XLA's CPU code (jax 0.10.2)
// was seen to divide an array by a scalar: float32 and float64 moments multiply by its
// reciprocal (one rounding apart); bfloat16 moments divide by it rounded to bfloat16; float16
// moments multiply by the reciprocal of it rounded to float16, itself rounded to float16 (so a
// correction under 1/65520, b2 above about 0.999985 at the first step, gives infinities, as in
// optax).
template <class T> T bias_correction(double decay, int64_t step) {
  return T(1) - std::pow(static_cast<T>(decay), static_cast<T>(step));
}
template <class T> T bias_reciprocal(double decay, int64_t step) {
  return T(1) / bias_correction<T>(decay, step);
}

// Stages of the built-in transformations (the transformation returns null where it cannot run
// fused: the caller then takes `update`). Slots are read and written in place.
std::shared_ptr<FusedStage> chain_stage(std::vector<std::shared_ptr<FusedStage>> stages);
std::shared_ptr<FusedStage> scale_stage(double factor, Variable* count_to_advance);
std::shared_ptr<FusedStage> trace_stage(State& trace, double decay, bool nesterov);
std::shared_ptr<FusedStage> adam_stage(State& mu, State& nu, Variable& count, double b1,
                                       double b2, double eps, double eps_root);
std::shared_ptr<FusedStage> rms_stage(State& nu, double decay, double eps);
std::shared_ptr<FusedStage> lion_stage(State& mu, double b1, double b2);
std::shared_ptr<FusedStage> decay_stage(double weight_decay, std::vector<bool> selected);
std::shared_ptr<FusedStage> clip_stage(const State& gradients, double max_norm);

// Whether the fused pass takes float16 blocks: on x86-64 CPUs with AVX2 and F16C, in optimized
// GCC builds (elsewhere float16 takes the tensor ops).
bool float16_lanes();

// True when the fused pass can take these parameters and updates: float32, float64, bfloat16 or
// (where float16_lanes()) float16 on the CPU, the gradient's dtype and block shape equal to the
// parameter's.
bool fusable(const State& updates, const State& params);

// One step over one parameter: updates = stage(gradient); then param += updates (add) or
// target = updates (ZeRO: the update is gathered before it is added).
void run_fused(const FusedStage& stage, size_t i, const at::Tensor& gradient,
               const at::Tensor& param, at::Tensor& target, bool add);

// How many parameter blocks this process has stepped through the fused pass (for tests).
int64_t fused_pass_runs();

}  // namespace detail
}  // namespace nnx::optim
