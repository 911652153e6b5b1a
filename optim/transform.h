// Optax-style gradient transformations that compose: init(params) -> state and
// update(updates, state, params) rewriting updates in place. Updates and parameters are States
// (path -> variable); per-parameter state (momenta) is OptState variables laid out, and
// sharded, as the parameters they are given (the Optimizer gives ZeRO slices: optim/zero.h), so
// updates are purely local on shards.
#pragma once

#include <nnx/framework/filter.h>
#include <nnx/framework/state.h>
#include <nnx/optim/schedule.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace nnx::optim {

struct TxState {
  Variable count;                       // OptState int64 scalar of steps taken, where counted
  std::vector<std::string> slot_names;  // optax's names of the slots: mu, nu, trace
  std::vector<State> slots;             // per-parameter moments, OptState variables
  std::vector<TxState> inner;           // states of chained transformations

  // Every variable (shared handles) under dotted paths, as optax's state trees:
  // prefix + "count", prefix + "mu.layers.0.kernel", prefix + "0.nu..." for chained states.
  State variables(const std::string& prefix = "") const;
};

class FusedStage;    // optim/detail/fused_stage.h
struct FusedInputs;

struct GradientTransformation {
  std::function<TxState(const State& params)> init;
  // Assigns new values to the state's variables (set_value) and never changes their tensors in
  // place: Optimizer::update runs it on a copy of the state, kept only if the whole step succeeds.
  std::function<void(State& updates, TxState& state, const State& params)> update;
  // Optional: the same update element by element, so that Optimizer::update runs the whole chain
  // and the parameter step in one pass over memory. The built-in transformations have it; a
  // transformation without it (or a chain holding one) takes `update`.
  std::function<std::shared_ptr<FusedStage>(TxState& state, const FusedInputs& inputs)> fused;
};

// A learning rate: a constant or a schedule of the step.
using LearningRate = std::variant<double, Schedule>;

GradientTransformation chain(std::vector<GradientTransformation> transforms);
GradientTransformation scale(double step_size);
GradientTransformation scale_by_schedule(Schedule schedule);
// Multiplies by -learning_rate (a descent step).
GradientTransformation scale_by_learning_rate(LearningRate learning_rate);
GradientTransformation trace(double decay, bool nesterov = false);
GradientTransformation scale_by_adam(double b1 = 0.9, double b2 = 0.999, double eps = 1e-8,
                                     double eps_root = 0);
GradientTransformation scale_by_rms(double decay = 0.9, double eps = 1e-8,
                                    double initial_scale = 0);
GradientTransformation scale_by_lion(double b1 = 0.9, double b2 = 0.99);
// updates += weight_decay * params, for the parameters `mask` selects (all by default).
GradientTransformation add_decayed_weights(double weight_decay,
                                           std::optional<Filter> mask = std::nullopt);
// Scales all updates by max_norm / global_norm when the global norm exceeds max_norm; the
// norm is exact on every mesh (computed through the sharding machinery).
GradientTransformation clip_by_global_norm(double max_norm);

// The optimizers, with optax's defaults.
GradientTransformation sgd(LearningRate learning_rate, std::optional<double> momentum = {},
                           bool nesterov = false);
GradientTransformation adam(LearningRate learning_rate, double b1 = 0.9, double b2 = 0.999,
                            double eps = 1e-8);
GradientTransformation adamw(LearningRate learning_rate, double b1 = 0.9, double b2 = 0.999,
                             double eps = 1e-8, double weight_decay = 1e-4,
                             std::optional<Filter> mask = std::nullopt);
GradientTransformation lion(LearningRate learning_rate, double b1 = 0.9, double b2 = 0.99,
                            double weight_decay = 1e-3, std::optional<Filter> mask = std::nullopt);
GradientTransformation rmsprop(LearningRate learning_rate, double decay = 0.9, double eps = 1e-8,
                               double initial_scale = 0, std::optional<double> momentum = {},
                               bool nesterov = false);

// The global L2 norm of all values of a State, exact on every mesh.
double global_norm(const State& tree);

}  // namespace nnx::optim
