// Optimizer steps: checks first (paths, meshes, shapes), then the transformation on each
// parameter's state layout, then the updates added in place (all-gathered for ZeRO parameters).
#include <nnx/core/error.h>
#include <nnx/framework/graph.h>
#include <nnx/optim/detail/step_kernel.h>
#include <nnx/optim/detail/fused_stage.h>
#include <nnx/optim/detail/tx_state_copy.h>
#include <nnx/optim/optimizer.h>
#include <nnx/optim/zero.h>
#include <nnx/sharding/redistribute.h>
#include <nnx/sharding/spec_check.h>

#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <set>

namespace nnx::optim {

namespace {

std::string mesh_text(const std::shared_ptr<const Mesh>& mesh) {
  return mesh ? mesh->to_string() : std::string("no mesh");
}
bool same_mesh(const std::shared_ptr<const Mesh>& a, const std::shared_ptr<const Mesh>& b) {
  return a == b || (a && b && *a == *b);
}

// The paths of `want` missing from `have` and those of `have` not in `want`.
std::pair<std::vector<std::string>, std::vector<std::string>> path_difference(
    const std::vector<std::string>& want, const State& have) {
  std::set<std::string> wanted(want.begin(), want.end());
  std::vector<std::string> missing, extra;
  for (const auto& p : want)
    if (!have.contains(p)) missing.push_back(fmt::format("'{}'", p));
  for (const auto& [p, v] : have)
    if (!wanted.count(p)) extra.push_back(fmt::format("'{}'", p));
  return {missing, extra};
}

std::string join_or_none(const std::vector<std::string>& items) {
  return items.empty() ? std::string("none") : fmt::format("{}", fmt::join(items, ", "));
}

}  // namespace

Optimizer::Optimizer(Module& model, GradientTransformation tx, Filter wrt)
    : tx_(std::move(tx)), wrt_(std::move(wrt)), step_(OptState(torch::zeros({}, torch::kLong))) {
  State params = nnx::state(model, wrt_);
  for (const auto& [path, p] : params) {
    NNX_CHECK(p.value().defined() && !p.value().is_abstract(),
              "'{}' has no values (abstract); materialize the model before building the optimizer",
              path);
    slots_.push_back({path, p.value().mesh(), optimizer_spec(path, p), p});
    sliced_.push_back(slots_.back().zero_spec.has_value());
    any_sliced_ = any_sliced_ || sliced_.back();
  }
  state_ = tx_.init(transform_view(params));
}

int64_t Optimizer::step() const { return step_.tensor().item<int64_t>(); }

State Optimizer::transform_view(const State& params) const {
  torch::NoGradGuard no_grad;
  State out;
  size_t i = 0;
  for (const auto& [path, p] : params) {
    const auto& zero = slots_[i++].zero_spec;
    if (!zero) {
      out.add(path, p);
      continue;
    }
    RedistributeLabel label(path + " (parameter view for the optimizer)");
    // The parameter is replicated along the added axes: this is a local slice.
    out.add(path, nnx::detail::variable_like(p, redistribute(p.value(), *zero)));
  }
  return out;
}

bool Optimizer::in_slot_order(const State& s) const {
  if (s.size() != slots_.size()) return false;
  size_t i = 0;
  for (const auto& [path, v] : s)
    if (path != slots_[i++].path) return false;
  return true;
}

void Optimizer::check_update(const State& params, const State& grads, bool ordered) const {
  if (!ordered) {
    std::vector<std::string> built;
    for (const auto& s : slots_) built.push_back(s.path);
    auto [gone, added] = path_difference(built, params);
    NNX_CHECK(gone.empty() && added.empty(),
              "the model's parameters are not those the optimizer was built for (missing: {}; "
              "new: {}); build the optimizer for this model with the same wrt filter",
              join_or_none(gone), join_or_none(added));
    auto [missing, extra] = path_difference(built, grads);
    NNX_CHECK(missing.empty() && extra.empty(),
              "{} updates for {} parameters (missing: {}; unexpected: {}); pass the gradients of "
              "exactly the optimized parameters (value_and_grad with the optimizer's wrt filter)",
              grads.size(), params.size(), join_or_none(missing), join_or_none(extra));
  }
  std::vector<std::string> problems;
  const std::string fix = "build the optimizer after placing the model";
  size_t i = 0;
  for (const auto& s : slots_) {
    const Variable& p = ordered ? state_entry(params, i) : params.at(s.path);
    const Variable& g = ordered ? state_entry(grads, i) : grads.at(s.path);
    ++i;
    if (!p.same_as(s.variable) && same_mesh(p.value().mesh(), s.mesh))  // else the mesh is named
      problems.push_back(fmt::format("'{}' is not the variable the optimizer was built for: the "
                                     "model is another one (or its variables were replaced); "
                                     "build an optimizer for this model", s.path));
    if (!same_mesh(p.value().mesh(), s.mesh))
      problems.push_back(fmt::format("'{}' is on {} but the optimizer was built for {}; {}",
                                     s.path, mesh_text(p.value().mesh()), mesh_text(s.mesh), fix));
    if (!same_mesh(g.value().mesh(), s.mesh))
      problems.push_back(fmt::format(
          "the gradient of '{}' is on {} but the optimizer was built for {}; {} and take the "
          "gradients of that model",
          s.path, mesh_text(g.value().mesh()), mesh_text(s.mesh), fix));
    if (g.shape() != p.shape())
      problems.push_back(fmt::format("the gradient of '{}' has shape {}, the parameter {}", s.path,
                                     to_string(g.shape()), to_string(p.shape())));
  }
  NNX_CHECK(problems.empty(), "nothing was updated: {} problem(s):{}", problems.size(),
            indented_list(problems));
}

void Optimizer::update(Module& model, State grads) {
  State params = nnx::state(model, wrt_);
  const bool ordered = in_slot_order(params) && in_slot_order(grads);
  check_update(params, grads, ordered);
  torch::NoGradGuard no_grad;
  // The gradients in the parameters' order, laid out as their state (ZeRO: the slice of this
  // rank), as new variables: the caller's stay as they are.
  State updates;
  size_t i = 0;
  for (const auto& [path, p] : params) {
    const Variable& g = ordered ? state_entry(grads, i) : grads.at(path);
    const Slot& s = slots_[i++];
    Array value = g.value();
    if (s.mesh) {
      auto want = pad_spec(s.zero_spec ? *s.zero_spec : p.value().spec(), p.shape().size());
      if (value.spec() != want || !value.partial_axes().empty()) {
        RedistributeLabel label(path + " (gradient into the optimizer's layout)");
        value = redistribute(value, want);
      }
    }
    updates.add(path, nnx::detail::variable_like(g, value));
  }
  // Without ZeRO the transformations see the parameters themselves.
  State sliced;
  if (any_sliced_) sliced = transform_view(params);
  const State& view = any_sliced_ ? sliced : params;
  // Every built-in chain: on CUDA tensors as nnx's step kernel (step_kernel.h), on CPU tensors
  // as nnx's own pass. Else the transformations' `update`.
  const bool kernel = tx_.fused && detail::step_kernel_applies(updates, params, view, sliced_);
  const bool own_pass = tx_.fused && detail::fusable(updates, view);
  std::shared_ptr<FusedStage> fused;
  if (kernel || own_pass) fused = tx_.fused(state_, FusedInputs{updates, view, true});
  std::vector<at::Tensor> zero_updates;
  if (fused && kernel &&
      detail::run_step_kernel(*fused, params, updates, view, sliced_, zero_updates)) {
    i = 0;
    for (auto& [path, p] : params) {
      if (sliced_[i]) add_sliced_update(path, p, state_entry(updates, i), zero_updates[i]);
      ++i;
    }
    step_.set_value(Array(torch::full({}, step() + 1, torch::kLong)));
    return;
  }
  if (fused && own_pass && fused->fits(view)) {
    step_fused(*fused, params, updates, view);
    return;
  }
  // All or nothing: the transformations step a copy of the state, and every parameter's update
  // is checked before any parameter or state changes. ZeRO updates are gathered to the
  // parameter's layout one at a time afterwards, so no more than one is ever held whole.
  TxState stepped = detail::shallow_copy(state_);
  tx_.update(updates, stepped, view);
  std::vector<Array> steps;
  i = 0;
  for (auto& [path, p] : params) {
    Array u = updates.at(path).value();
    if (slots_[i++].zero_spec) {
      NNX_CHECK(u.mesh() && *u.mesh() == *p.value().mesh() && u.shape() == p.shape(),
                "nothing was updated: the update of '{}' is of shape {} on {}, the parameter of "
                "shape {} on {}",
                path, to_string(u.shape()), u.mesh() ? u.mesh()->to_string() : "no mesh",
                to_string(p.shape()), p.value().mesh()->to_string());
    } else {
      NNX_CHECK(u.local().sizes() == p.tensor().sizes(),
                "nothing was updated: the update of '{}' has a local block of shape {}, the "
                "parameter {}",
                path, to_string(u.local().sizes().vec()), to_string(p.tensor().sizes().vec()));
    }
    steps.push_back(std::move(u));
  }
  detail::assign_values(state_, stepped);  // checks before it assigns
  i = 0;
  for (auto& [path, p] : params) {
    Array u = std::move(steps[i]);
    // ZeRO: each replica updated its slice; all_gather the update to the parameter's layout.
    if (slots_[i++].zero_spec) {
      RedistributeLabel label(path + " (update into the parameter's layout)");
      u = redistribute(u, p.value().spec());
    }
    p.tensor().add_(u.local().to(p.dtype()));
  }
  step_.set_value(Array(torch::full({}, step() + 1, torch::kLong)));
}

void Optimizer::step_fused(FusedStage& stage, State& params, State& updates, const State& view) {
  stage.prepare();
  size_t i = 0;
  for (auto& [path, p] : params) {
    const Slot& s = slots_[i];
    const Variable& g = updates.at(path);
    const at::Tensor& seen = (view.begin() + static_cast<std::ptrdiff_t>(i))->second.tensor();
    if (!s.zero_spec) {
      at::Tensor target = p.tensor();
      detail::run_fused(stage, i++, g.tensor(), seen, target, /*add=*/true);
      continue;
    }
    at::Tensor slice = at::empty_like(g.tensor(), at::MemoryFormat::Contiguous);
    detail::run_fused(stage, i++, g.tensor(), seen, slice, /*add=*/false);
    add_sliced_update(path, p, g, slice);
  }
  stage.finish();
  step_.set_value(Array(torch::full({}, step() + 1, torch::kLong)));
}

void Optimizer::add_sliced_update(const std::string& path, Variable& param,
                                  const Variable& update, const at::Tensor& slice) {
  RedistributeLabel label(path + " (update into the parameter's layout)");
  Array u = redistribute(update.value().with_local(slice), param.value().spec());
  param.tensor().add_(u.local());
}

State Optimizer::state() const {
  State out;
  out.add("step", step_);
  for (const auto& [path, v] : state_.variables("opt_state.")) out.add(path, v);
  return out;
}

void Optimizer::load_state(const State& source) {
  State targets = state();
  std::vector<std::string> problems;
  for (const auto& [path, t] : targets) {
    if (!source.contains(path)) {
      problems.push_back(fmt::format("'{}': missing from the source", path));
      continue;
    }
    const Array& from = source.at(path).value();
    if (!from.defined() || from.is_abstract()) {
      problems.push_back(fmt::format("'{}': the source has no values (abstract)", path));
      continue;
    }
    if (from.shape() != t.shape() || from.dtype() != t.dtype())
      problems.push_back(fmt::format("'{}': {}{} given for {}{}", path, dtype_name(from.dtype()),
                                     to_string(from.shape()), dtype_name(t.dtype()),
                                     to_string(t.shape())));
    const auto& to_mesh = t.value().mesh();
    if (from.mesh() && to_mesh && !(*from.mesh() == *to_mesh))
      problems.push_back(fmt::format("'{}': the source is on {} but this optimizer is on {}; "
                                     "restore it onto the optimizer's mesh",
                                     path, from.mesh()->to_string(), to_mesh->to_string()));
  }
  for (const auto& [path, v] : source)
    if (!targets.contains(path))
      problems.push_back(
          fmt::format("'{}': not a variable of this optimizer (unknown path)", path));
  NNX_CHECK(problems.empty(), "nothing was loaded: {} problem(s):{}", problems.size(),
            indented_list(problems));
  torch::NoGradGuard no_grad;
  for (auto& [path, t] : targets) {
    const Array& from = source.at(path).value();
    const Array& to = t.value();
    RedistributeLabel label(path + " (optimizer state loaded)");
    at::Tensor local;
    if (!to.mesh()) local = gather(from);
    else if (!from.mesh()) local = nnx::slice(from.local(), to.local_box());
    else local = redistribute(from, NamedSharding{to.mesh(), to.spec()}).local();
    t.set_value(to.with_local(local.clone()));
  }
}

}  // namespace nnx::optim
