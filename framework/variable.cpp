// Variable handles and kind names.
#include <nnx/core/error.h>
#include <nnx/framework/materialize.h>
#include <nnx/framework/variable.h>
#include <nnx/sharding/mesh_context.h>
#include <nnx/sharding/redistribute.h>
#include <nnx/framework/state_sharding.h>

#include <cxxabi.h>

#include <atomic>
#include <cstdlib>
#include <memory>

namespace nnx {

namespace {

std::atomic<int64_t> failed_placements{0};

LazyArray with_metadata(LazyArray init, const Metadata& metadata) {
  init.metadata = init.metadata.merged_with(metadata);
  return init;
}

// The spec of a value of `shape` on the MeshContext's mesh, or why it has none (`problem`).
PartitionSpec context_spec(const Metadata& metadata, const Shape& shape, const Mesh& mesh,
                           std::string& problem) {
  try {
    return checked_partition_spec(metadata, shape, mesh,
                                  fmt::format("a variable of shape {}", to_string(shape)));
  } catch (const Error& e) {
    problem = e.what();
    ++failed_placements;
    return {};
  }
}

}  // namespace

namespace detail {
int64_t placement_failures() { return failed_placements.load(std::memory_order_relaxed); }

void raise_if_unplaced(const std::string& path, const Variable& variable) {
  const auto& impl = VariableAccess::impl(variable);
  if (!impl || impl->placement_error.empty()) return;
  const std::string what = path.empty() ? "a variable built under it" : fmt::format("'{}'", path);
  throw_error("MeshContext", fmt::format("{} could not be placed on the context's mesh: {}", what,
                                         impl->placement_error));
}
}  // namespace detail

bool VariableType::is_a(const VariableType& other) const {
  for (const VariableType* t = this; t != nullptr; t = t->parent)
    if (t == &other) return true;
  return false;
}

namespace detail {
std::string type_display_name(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(
      abi::__cxa_demangle(type.name(), nullptr, nullptr, &status), std::free);
  std::string out = status == 0 && name ? name.get() : type.name();
  if (out.rfind("nnx::", 0) == 0) out = out.substr(5);
  return out;
}
}  // namespace detail

Variable::Variable(Array value, Metadata metadata)
    : impl_(std::make_shared<detail::VariableImpl>(
          detail::VariableImpl{std::move(value), std::move(metadata), &variable_type<Variable>()})) {
  auto& v = impl_->value;
  if (!v.defined() || v.is_abstract()) return;
  if (detail::abstract_init_active()) {
    // Inside eval_shape a value built from a tensor becomes abstract, keeping the tensor so
    // that materialize can place it later. A value already placed on a mesh stays as it is:
    // its blocks exist nowhere else, and materialize moves it to the variable's layout.
    if (v.mesh()) return;
    at::Tensor full = v.local();
    v = Array::abstract(std::make_shared<const LazyArray>(
        LazyArray{v.shape(), v.dtype(), [full](const Box& box) { return slice(full, box); },
                  impl_->metadata}));
  } else if (const auto& mesh = current_mesh(); mesh && !v.mesh()) {
    // Under a MeshContext a whole tensor is placed by the variable's spec.
    auto spec = context_spec(impl_->metadata, v.shape(), *mesh, impl_->placement_error);
    if (impl_->placement_error.empty()) v = device_put(v.local(), {mesh, spec});
  }
}

Variable::Variable(const LazyArray& init, Metadata metadata) {
  LazyArray full = with_metadata(init, metadata);
  const auto& mesh = current_mesh();
  std::string problem;
  if (mesh && !detail::abstract_init_active())
    context_spec(full.metadata, full.shape, *mesh, problem);
  if (problem.empty()) {
    *this = Variable(materialize(full), full.metadata);
    return;
  }
  // Nothing is computed for a value that cannot be placed; value() raises the problem.
  impl_ = std::make_shared<detail::VariableImpl>(detail::VariableImpl{
      Array::abstract(std::make_shared<const LazyArray>(full)), full.metadata,
      &variable_type<Variable>(), std::move(problem)});
}

const Array& Variable::value() const {
  NNX_CHECK(impl_, "this variable holds nothing: a field declared with NNX_FIELD but never "
            "initialized in its module's constructor, or a default-constructed handle; assign one "
            "(e.g. nnx::Param(init(...))) first");
  if (!impl_->placement_error.empty()) [[unlikely]]
    detail::raise_if_unplaced(impl_->placement_path, *this);
  return impl_->value;
}

void Variable::set_value(Array value) {
  NNX_CHECK(impl_, "empty variable handle: assign a variable before setting its value");
  impl_->value = std::move(value);
  impl_->placement_error.clear();  // a new value: placed by whoever set it
}

const Metadata& Variable::metadata() const {
  NNX_CHECK(impl_, "empty variable handle has no metadata");
  return impl_->metadata;
}

Metadata& Variable::metadata() {
  NNX_CHECK(impl_, "empty variable handle has no metadata");
  return impl_->metadata;
}

const VariableType& Variable::type() const {
  NNX_CHECK(impl_, "empty variable handle has no kind");
  return *impl_->type;
}

void Variable::set_type(const VariableType& type) { impl_->type = &type; }

namespace detail {
Variable variable_like(const Variable& like, Array value) {
  Variable out;
  VariableAccess::reset(out, std::make_shared<VariableImpl>(
                                 VariableImpl{std::move(value), like.metadata(), &like.type()}));
  return out;
}
}  // namespace detail

}  // namespace nnx
