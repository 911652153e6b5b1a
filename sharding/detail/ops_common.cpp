// Op rule machinery.
#include <nnx/core/error.h>
#include <nnx/sharding/ops.h>
#include <nnx/sharding/detail/local_steps.h>
#include <nnx/sharding/detail/ops_common.h>
#include <nnx/sharding/detail/whole_layout.h>
#include <nnx/sharding/redistribute.h>

#include <algorithm>
#include <string>

namespace nnx {

int64_t& fallback_count() {
  thread_local int64_t count = 0;
  return count;
}

namespace detail {

namespace {
template <class Arrays>
const std::shared_ptr<const Mesh>& common_mesh_of(const Arrays& arrays, const char* op) {
  static const std::shared_ptr<const Mesh> kNoMesh;
  const std::shared_ptr<const Mesh>* mesh = &kNoMesh;
  for (const Array* a : arrays) {
    if (!a->defined()) throw_error(op, "an input array is empty");
    if (!a->mesh()) continue;
    if (!*mesh) mesh = &a->mesh();
    else if (*mesh != a->mesh() &&
             !(**mesh == *a->mesh() && (*mesh)->is_bound() == a->mesh()->is_bound()))
      throw_error(op, fmt::format("inputs lie on two meshes, {} and {}; redistribute onto one",
                                  (*mesh)->to_string(), a->mesh()->to_string()));
  }
  return *mesh;
}
}  // namespace

const std::shared_ptr<const Mesh>& common_mesh(const std::vector<const Array*>& arrays,
                                               const char* op) {
  return common_mesh_of(arrays, op);
}

const std::shared_ptr<const Mesh>& common_mesh(std::initializer_list<const Array*> arrays,
                                               const char* op) {
  return common_mesh_of(arrays, op);  // no vector to allocate on every op
}

Array on_mesh(const Array& a, const std::shared_ptr<const Mesh>& mesh) {
  if (a.mesh() || !mesh) return a;
  // A replicated operand joins the mesh on the mesh's device (a CPU constant beside GPU blocks).
  return Array::from_local(local_on_mesh(a, mesh), a.shape(), NamedSharding{mesh, P()});
}

const Array& on_mesh(const Array& a, const std::shared_ptr<const Mesh>& mesh,
                     std::optional<Array>& held) {
  if (a.mesh() || !mesh) return a;
  return held.emplace(on_mesh(a, mesh));
}

at::Tensor local_on_mesh(const Array& a, const std::shared_ptr<const Mesh>& mesh) {
  if (a.mesh() || !mesh || a.local().device() == mesh->device()) return a.local();
  return a.local().to(mesh->device());
}

DimAxes dims_of(const Array& a) {
  DimAxes out;
  for (const auto& e : a.spec().entries()) out.push_back(e.names());
  out.resize(a.shape().size());
  return out;
}

Layout layout_of(const Array& a) { return Layout{a.shape(), dims_of(a), a.partial_axes()}; }

Array relayout(const Array& a, const DimAxes& dims, const Axes& partial,
               std::source_location op) {
  if (!a.mesh()) return a;
  Axes have = a.partial_axes(), want = partial;
  std::sort(have.begin(), have.end());
  std::sort(want.begin(), want.end());
  if (dims_of(a) == dims && have == want) return a;
  std::vector<SpecEntry> entries;
  for (const auto& d : dims) entries.push_back(SpecEntry(d));
  auto label = RedistributeLabel::fallback(op.function_name());
  return redistribute(a, PartitionSpec(std::move(entries)), partial);
}

Array planned_result(at::Tensor local, const std::shared_ptr<const Mesh>& mesh,
                     const PlannedOp& planned) {
  return Array::from_layout(std::move(local), mesh, planned.output_layout);
}

const at::Tensor& planned_local(const Array& a, const PlannedOp& planned, size_t i,
                                std::optional<at::Tensor>& held, std::source_location op) {
  const OpPlan& plan = planned.plan;
  if (plan.steps[i].steps.empty()) return a.local();
  auto label = RedistributeLabel::fallback(op.function_name());
  // The plan's own steps: a plan found for these inputs was made for a's layout.
  if (planned.moves_locally[i]) return run_local_steps(a, plan.steps[i], held);
  return held.emplace(relayout(a, plan.targets[i].dims, plan.targets[i].partial, op).local());
}

Array resolved(const Array& a, std::source_location op) {
  if (a.partial_axes().empty()) return a;
  return relayout(a, dims_of(a), {}, op);
}

Array whole_dim(const Array& a, int64_t d) {
  Array x = resolved(a);
  if (!x.mesh() || dims_of(x)[d].empty()) return x;
  auto dims = dims_of(x);
  dims[d].clear();
  ++fallback_count();  // a gather of the sharded dim
  return relayout(x, dims, {});
}

Array make_result(at::Tensor local, Shape shape, const std::shared_ptr<const Mesh>& mesh,
                  const DimAxes& dims, const Axes& partial) {
  if (!mesh) return Array(std::move(local));
  std::vector<SpecEntry> entries;
  for (const auto& d : dims) entries.push_back(SpecEntry(d));
  return Array::from_local(std::move(local), std::move(shape),
                           NamedSharding{mesh, PartitionSpec(std::move(entries))}, partial);
}

bool all_replicated(std::initializer_list<const Array*> arrays) {
  for (const Array* a : arrays)
    if (!a->is_fully_replicated()) return false;
  return true;
}

Array replicated_result(at::Tensor local, const std::shared_ptr<const Mesh>& mesh,
                        std::initializer_list<const Array*> like) {
  for (const Array* a : like)
    if (a->mesh() == mesh && !a->initializer() && local.sizes().equals(a->shape()) &&
        a->is_fully_replicated())
      return a->with_local(std::move(local));
  // The whole layout, kept for the shapes made last (making one took a fifth of a 16x16 sum's
  // time on a mesh: tools/bench/op_overhead.cpp).
  auto layout = whole_layout(local.sizes());
  return Array::from_layout(std::move(local), mesh, std::move(layout));
}

Axes without(const Axes& axes, const Axes& remove) {
  Axes out;
  for (const auto& a : axes)
    if (!contains(remove, a)) out.push_back(a);
  return out;
}

Axes used_axes(const DimAxes& dims) {
  Axes out;
  for (const auto& d : dims) out.insert(out.end(), d.begin(), d.end());
  return out;
}

std::string shape_str(const Array& a) { return to_string(a.shape()); }

void check_same_shape(const Array& predictions, const Array& targets, const char* op) {
  if (predictions.shape() != targets.shape())
    throw_error(op, fmt::format("predictions {} and targets {} differ in shape; broadcasting "
                                "them ([N, 1] against [N] gives [N, N]) is almost always a "
                                "mistake: reshape one to the other",
                                shape_str(predictions), shape_str(targets)));
}

}  // namespace detail
}  // namespace nnx
