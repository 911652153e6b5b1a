// Running redistribution plans (redistribute_plan.h) on Arrays, and placing whole or per-process
// data onto a mesh.
#include <nnx/core/error.h>
#include <nnx/sharding/detail/differentiable_collectives.h>
#include <nnx/sharding/redistribute.h>
#include <nnx/sharding/detail/call_stack.h>
#include <nnx/sharding/detail/local_steps.h>
#include <nnx/sharding/detail/rank_shapes.h>
#include <nnx/sharding/spec_check.h>

#include <torch/types.h>

#include <algorithm>
#include <cstdlib>

namespace nnx {

RedistributeCounts& redistribute_counts() {
  thread_local RedistributeCounts counts;
  return counts;
}

namespace {

thread_local std::vector<std::string> labels;
thread_local const char* fallback_op = nullptr;

// "matmul" from "nnx::Array nnx::matmul(const nnx::Array&, const nnx::Array&)"; a plain name
// stays as it is.
std::string short_function_name(const char* signature) {
  std::string name = signature;
  name = name.substr(0, name.find('('));
  if (auto space = name.rfind(' '); space != std::string::npos) name = name.substr(space + 1);
  if (auto colon = name.rfind("::"); colon != std::string::npos) name = name.substr(colon + 2);
  return name;
}

bool log_plans() {
  static const bool on = [] {
    const char* v = std::getenv("NNX_LOG_REDISTRIBUTE");
    return v != nullptr && std::string(v) != "0" && std::string(v) != "";
  }();
  return on;
}

// Prints `plan` on rank 0 where NNX_LOG_REDISTRIBUTE asks for it.
void log_plan(const Array& x, const RedistributePlan& plan) {
  if (!log_plans() || plan.steps.empty() || x.mesh()->rank() != 0) return;
  const std::string label = current_redistribute_label();
  fmt::print(stderr, "[nnx redistribute] {}{} {}: {}\n", label, label.empty() ? "" : ":",
             to_string(x.shape()), plan.to_string());
}

// A step that stays on this rank, a slice or joining a pending sum: the new block, or an
// undefined tensor where the block stays as it is (no view made, no reference counted).
at::Tensor run_local_step(const at::Tensor& local, const RedistributeStep& step,
                          const Mesh& mesh) {
  auto& counts = redistribute_counts();
  if (step.kind == RedistributeStep::Kind::slice) {
    ++counts.local_slice;
    const int64_t ways = mesh.axis_size(step.axis);
    if (ways == 1) return {};  // a one-process axis: the block is the whole dim
    const int64_t size = local.size(step.dim) / ways;
    return local.narrow(step.dim, mesh.coordinate(step.axis) * size, size);
  }
  // The value stays on coordinate 0 of the axis, zeros elsewhere: filled, not multiplied by 0,
  // for an inf or NaN elsewhere would turn the sum into NaN.
  ++counts.to_partial;
  if (mesh.coordinate(step.axis) == 0) return {};
  return local.masked_fill(at::ones({}, local.options().dtype(at::kBool)), 0);
}

}  // namespace

RedistributeLabel::RedistributeLabel(std::string label) : named_(true), previous_op_(fallback_op) {
  labels.push_back(std::move(label));
}

RedistributeLabel::RedistributeLabel(const char* op) : named_(false), previous_op_(fallback_op) {
  if (fallback_op == nullptr) fallback_op = op;  // the outermost op names its helpers' work
}

RedistributeLabel RedistributeLabel::fallback(const char* op) { return RedistributeLabel(op); }

RedistributeLabel::~RedistributeLabel() {
  if (named_) labels.pop_back();
  fallback_op = previous_op_;
}

std::string current_redistribute_label() {
  if (!labels.empty()) return labels.back();
  return fallback_op ? short_function_name(fallback_op) : "";
}

Array device_put(const at::Tensor& full, const NamedSharding& sharding) {
  NNX_CHECK(sharding.mesh && sharding.mesh->is_bound(),
            "device_put needs a mesh made by nnx::make_mesh");
  // Collective on a mesh of several processes, as jax.device_put: their tensors agree in dtype
  // and shape. First, before any check that could fail on some ranks only while the others wait
  // in the collective.
  detail::check_same_on_every_rank(
      *sharding.mesh, full,
      {"device_put", "whole tensors",
       "every process passes the same whole tensor; to pass each process's own block, use "
       "make_array_from_process_local_data"});
  Shape shape = full.sizes().vec();
  auto spec = pad_spec(sharding.spec, shape.size());
  check_spec(spec, shape, *sharding.mesh, "device_put");
  Box box = block_of(shape, spec, *sharding.mesh, sharding.mesh->coordinates());
  at::Tensor local = full;
  for (size_t d = 0; d < shape.size(); ++d)
    if (box.size[d] != shape[d]) local = local.narrow(d, box.start[d], box.size[d]);
  // Only the block moves to the mesh's device (a no-op where it already lies).
  return Array::from_local(local.to(sharding.mesh->device()), shape,
                           NamedSharding{sharding.mesh, spec});
}

Array make_array_from_process_local_data(const NamedSharding& sharding, const at::Tensor& local) {
  NNX_CHECK(sharding.mesh && sharding.mesh->is_bound(),
            "make_array_from_process_local_data needs a mesh made by nnx::make_mesh");
  detail::check_same_on_every_rank(
      *sharding.mesh, local,
      {"make_array_from_process_local_data", "local blocks",
       "every process passes a block of the same dtype and shape (the global shape is the "
       "block's times the mesh axes its spec names); pad a short last batch and mask it, as "
       "nnx::DataLoader does"});
  auto spec = pad_spec(sharding.spec, local.dim());
  NNX_CHECK(spec.size() == static_cast<size_t>(local.dim()),
            "{} is longer than the local data's rank {}", sharding.spec.to_string(), local.dim());
  Shape shape = local.sizes().vec();
  for (size_t d = 0; d < spec.size(); ++d)
    for (const auto& a : spec[d].names()) shape[d] *= sharding.mesh->axis_size(a);
  return Array::from_local(local.to(sharding.mesh->device()), shape,
                           NamedSharding{sharding.mesh, spec});
}

at::Tensor gather(const Array& x, std::source_location where) {
  NNX_CHECK(!x.is_abstract(), "gather needs values, and this {} array is abstract (shapes only, "
            "as eval_shape makes them); materialize it first (nnx::materialize, or a restore)",
            to_string(x.shape()));
  if (x.is_fully_replicated()) return x.local();
  detail::CallSiteScope site(where);
  auto label = RedistributeLabel::fallback("gather");
  return redistribute(x, PartitionSpec()).local();
}

Array redistribute(const Array& x, const PartitionSpec& spec,
                   const std::vector<std::string>& partial_axes, std::source_location where) {
  NNX_CHECK(x.mesh() != nullptr, "the array is on no mesh; use device_put to place it on one");
  return redistribute(x, NamedSharding{x.mesh(), spec}, partial_axes, where);
}

Array redistribute(const Array& x, const NamedSharding& target,
                   const std::vector<std::string>& partial_axes, std::source_location where) {
  detail::CallSiteScope site(where);
  NNX_CHECK(x.mesh() != nullptr, "the array is on no mesh; use device_put to place it on one");
  NNX_CHECK(target.mesh != nullptr, "the target sharding names no mesh (null); pass the array's "
            "mesh, or redistribute(x, spec)");
  NNX_CHECK(*target.mesh == *x.mesh(), "cannot redistribute from {} to another mesh {}",
            x.mesh()->to_string(), target.mesh->to_string());
  const Mesh& mesh = *x.mesh();
  auto target_spec = pad_spec(target.spec, x.shape().size());
  check_spec(target_spec, x.shape(), mesh, "redistribute");
  const RedistributePlan plan = plan_redistribute(x.spec(), x.partial_axes(), target_spec,
                                                  partial_axes, x.shape().size());
  return run_plan(x, plan);
}

Array run_plan(const Array& x, const RedistributePlan& plan) {
  using K = RedistributeStep::Kind;
  NNX_CHECK(x.mesh() != nullptr, "the array is on no mesh; use device_put to place it on one");
  const Mesh& mesh = *x.mesh();
  log_plan(x, plan);
  auto& counts = redistribute_counts();
  at::Tensor local = x.local();
  for (const auto& step : plan.steps) {
    // Only collectives look their communicator up (the lookup allocates).
    auto comm = [&]() -> const Communicator& { return mesh.comm(step.axis); };
    switch (step.kind) {
      case K::reduce_scatter:
        local = detail::reduce_scatter_ad(local, comm(), step.dim);
        ++counts.reduce_scatter;
        break;
      case K::all_reduce:
        local = detail::all_reduce_ad(local, comm());
        ++counts.all_reduce;
        break;
      case K::all_to_all:  // split the dim that takes the axis, join the one that frees it
        local = detail::all_to_all_ad(local, comm(), step.to_dim, step.dim);
        ++counts.all_to_all;
        break;
      case K::all_gather:
        local = detail::all_gather_ad(local, comm(), step.dim);
        ++counts.all_gather;
        break;
      case K::slice:
      case K::to_partial:
        if (at::Tensor moved = run_local_step(local, step, mesh); moved.defined())
          local = std::move(moved);
        break;
    }
  }
  return Array::from_local(local, x.shape(), NamedSharding{x.mesh(), plan.to}, plan.to_partial);
}

namespace detail {

bool stays_local(const RedistributePlan& plan) {
  return std::none_of(plan.steps.begin(), plan.steps.end(),
                      [](const RedistributeStep& step) { return step.communicates(); });
}

const at::Tensor& run_local_steps(const Array& x, const RedistributePlan& plan,
                                  std::optional<at::Tensor>& held) {
  log_plan(x, plan);
  const at::Tensor* local = &x.local();
  for (const auto& step : plan.steps)
    if (at::Tensor moved = run_local_step(*local, step, *x.mesh()); moved.defined())
      local = &held.emplace(std::move(moved));
  return *local;
}

}  // namespace detail

}  // namespace nnx
