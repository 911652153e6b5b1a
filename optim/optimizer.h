// nnx::optim::Optimizer, as flax.nnx.Optimizer: holds a transformation's state for the
// parameters a filter selects and applies updates to the model in place, locally on shards.
#pragma once

#include <nnx/framework/module.h>
#include <nnx/optim/transform.h>

namespace nnx::optim {

class Optimizer {
 public:
  Optimizer(Module& model, GradientTransformation tx, Filter wrt = OfType<Param>);

  // One step: updates = tx(grads); params += updates. `grads` (from value_and_grad) must hold
  // exactly the optimized parameters' paths.
  void update(Module& model, State grads);
  int64_t step() const { return step_; }
  const TxState& opt_state() const { return state_; }

 private:
  GradientTransformation tx_;
  Filter wrt_;
  TxState state_;
  int64_t step_ = 0;
};

}  // namespace nnx::optim
