// nnx::optim::Optimizer, as flax.nnx.Optimizer: holds a transformation's state for the
// parameters a filter selects and applies updates to the model in place, locally on shards.
// Parameters with optimizer_sharding keep their state sharded further (ZeRO-1, optim/zero.h).
#pragma once

#include <nnx/framework/module.h>
#include <nnx/optim/transform.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace nnx::optim {

class Optimizer {
 public:
  // Build it after placing the model: it records each parameter's mesh and lays out its state
  // as the parameter (further sharded by optimizer_sharding).
  Optimizer(Module& model, GradientTransformation tx, Filter wrt = OfType<Param>);

  // One step: updates = tx(grads); params += updates. `grads` (from value_and_grad) must hold
  // exactly the optimized parameters' paths, on their meshes; on an error nothing changes.
  void update(Module& model, State grads);
  int64_t step() const;
  const TxState& opt_state() const { return state_; }

  // Every optimizer variable, shared (not copied), for checkpoints: "step", then the
  // transformation's under "opt_state." (opt_state.0.count, opt_state.0.mu.layers.0.kernel, ...).
  State state() const;
  // Copies `source`'s values into this optimizer's variables, relaid out to theirs (same mesh, or
  // no mesh). All or nothing: every missing, unknown or mismatched path is listed in one error.
  void load_state(const State& source);

 private:
  struct Slot {  // what the optimizer recorded of one parameter
    std::string path;
    std::shared_ptr<const Mesh> mesh;           // null: the parameter is on no mesh
    std::optional<PartitionSpec> zero_spec;     // its state's layout when sharded further
    Variable variable;                          // the parameter itself (update checks identity)
  };
  // The parameters as the transformation sees them (ZeRO ones sliced to their state's layout).
  State transform_view(const State& params) const;
  // `ordered`: both are in_slot_order (positions then stand for paths).
  void check_update(const State& params, const State& grads, bool ordered) const;
  // True when `s` holds exactly the recorded paths in their order (a model's state, and the
  // gradients value_and_grad returns for it): entry i then stands for slot i, with no lookups.
  bool in_slot_order(const State& s) const;
  // The whole step in one pass per parameter block (optim/detail/fused_stage.h).
  void step_fused(FusedStage& stage, State& params, State& updates, const State& view);
  // ZeRO: this replica's `slice` of the update (laid out as `update`), all-gathered to the
  // parameter's layout and added to it.
  static void add_sliced_update(const std::string& path, Variable& param, const Variable& update,
                                const at::Tensor& slice);

  GradientTransformation tx_;
  Filter wrt_;
  std::vector<Slot> slots_;
  std::vector<bool> sliced_;  // per slot: its state is a ZeRO slice of the parameter
  bool any_sliced_ = false;
  TxState state_;
  Variable step_;
};

}  // namespace nnx::optim
