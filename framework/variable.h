// Variables: handles to a value (Array) with metadata and a kind. Copying a handle shares the
// variable (tied weights are one variable reached by two paths). Kinds are types:
//   struct LoRAParam : nnx::VariableKind<LoRAParam, nnx::Param> { using VariableKind::VariableKind; };
#pragma once

#include <nnx/sharding/array.h>
#include <nnx/framework/materialize.h>
#include <nnx/sharding/metadata.h>
#include <nnx/framework/variable_type.h>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

namespace nnx {

class Variable;
template <class K> const VariableType& variable_type();

namespace detail {
struct VariableImpl {
  Array value;
  Metadata metadata;
  const VariableType* type;
  // Set when a MeshContext could not place the value (its spec does not fit the mesh). The
  // field being built does not know its name yet, so the error waits: value() and graph walks
  // raise it with the path, which field registrations fill in as the model is assembled.
  std::string placement_error{};
  std::string placement_path{};
};
// Variables on this process whose placement failed so far (never decreases): while none did,
// field registrations have nothing to name.
int64_t placement_failures();
// Raises a failed placement of `variable` as the error of `path` (does nothing when none).
void raise_if_unplaced(const std::string& path, const Variable& variable);
struct VariableAccess;
}  // namespace detail

class Variable {
 public:
  using kind_self = Variable;

  Variable() = default;  // an empty handle; assign a variable to it later
  Variable(Array value, Metadata metadata = {});
  // Materializes a lazily initialized array; `metadata` adds to the initializer's metadata.
  Variable(const LazyArray& init, Metadata metadata = {});

  bool defined() const { return impl_ != nullptr; }
  explicit operator bool() const { return defined(); }

  const Array& value() const;
  void set_value(Array value);
  // This process's tensor of the value (the whole tensor on one device).
  const at::Tensor& tensor() const { return value().local(); }
  const Shape& shape() const { return value().shape(); }
  at::ScalarType dtype() const { return value().dtype(); }

  const Metadata& metadata() const;
  Metadata& metadata();

  const VariableType& type() const;
  // True when this variable's kind is K or refines it (Flax: isinstance(v, K)).
  template <class K> bool is() const { return type().is_a(variable_type<K>()); }
  // True when both handles refer to the same variable.
  bool same_as(const Variable& other) const { return impl_ == other.impl_; }
  const void* id() const { return impl_.get(); }

 protected:
  void set_type(const VariableType& type);

 private:
  friend struct detail::VariableAccess;
  std::shared_ptr<detail::VariableImpl> impl_;
};

// Base of every kind: Self is the kind being defined, Base the kind it refines.
template <class Self, class Base = Variable>
class VariableKind : public Base {
 public:
  using kind_self = Self;
  using kind_base = Base;

  VariableKind() = default;
  VariableKind(Array value, Metadata metadata = {}) : Base(std::move(value), std::move(metadata)) {
    this->set_type(variable_type<Self>());
  }
  VariableKind(const LazyArray& init, Metadata metadata = {}) : Base(init, std::move(metadata)) {
    this->set_type(variable_type<Self>());
  }
  VariableKind(at::Tensor value, Metadata metadata = {})
      : VariableKind(Array(std::move(value)), std::move(metadata)) {}
};

// The built-in kinds, as in Flax.
struct Param : VariableKind<Param> { using VariableKind::VariableKind; };
struct BatchStat : VariableKind<BatchStat> { using VariableKind::VariableKind; };
struct Cache : VariableKind<Cache> { using VariableKind::VariableKind; };
struct Intermediate : VariableKind<Intermediate> { using VariableKind::VariableKind; };
struct OptState : VariableKind<OptState> { using VariableKind::VariableKind; };
struct RngState : VariableKind<RngState> { using VariableKind::VariableKind; };
struct RngKey : VariableKind<RngKey, RngState> { using VariableKind::VariableKind; };
struct RngCount : VariableKind<RngCount, RngState> { using VariableKind::VariableKind; };

template <class K>
constexpr bool is_variable_kind_v =
    std::is_base_of_v<Variable, K> && std::is_same_v<typename K::kind_self, K>;

template <class K> const VariableType& variable_type() {
  static_assert(std::is_base_of_v<Variable, K>, "variable_type<K>: K must be a Variable kind");
  static_assert(std::is_same_v<typename K::kind_self, K>,
                "a variable kind must derive from nnx::VariableKind<Self, Base> "
                "(e.g. struct MyParam : nnx::VariableKind<MyParam, nnx::Param> "
                "{ using VariableKind::VariableKind; })");
  if constexpr (std::is_same_v<K, Variable>) {
    static const VariableType type{"Variable", nullptr};
    return type;
  } else {
    static const VariableType type{detail::type_display_name(typeid(K)),
                                   &variable_type<typename K::kind_base>()};
    return type;
  }
}

namespace detail {
// Internal access for graph operations (rebinding a handle to a fresh variable).
// A new variable of `like`'s kind and metadata holding `value` exactly as given (gradients,
// updates: no eval_shape or mesh-context handling).
Variable variable_like(const Variable& like, Array value);

struct VariableAccess {
  static const std::shared_ptr<VariableImpl>& impl(const Variable& v) { return v.impl_; }
  static void reset(Variable& v, std::shared_ptr<VariableImpl> impl) { v.impl_ = std::move(impl); }
};
}  // namespace detail

}  // namespace nnx
