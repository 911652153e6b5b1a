// nnx::Module: subclass it and declare each variable or submodule once with NNX_FIELD:
//   struct MLP : nnx::Module {
//     nnx::Linear NNX_FIELD(fc1);
//     std::vector<nnx::Linear> NNX_FIELD(blocks);
//   };
// Fields may be Variables, Modules, and std::vector / std::map<std::string, T> /
// std::optional / std::shared_ptr of them; paths read "blocks.0.kernel".
#pragma once

#include <nnx/framework/variable.h>

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

namespace nnx {

class Module;

namespace detail {

// What a walk over a module graph sees: every variable handle, every module, in field order.
class GraphVisitor {
 public:
  virtual ~GraphVisitor() = default;
  virtual void variable(const std::string& path, Variable& handle) = 0;
  // Returns false to skip the module's fields.
  virtual bool module(const std::string& path, Module& module) { return true; }
  // A module held through a shared_ptr: the visitor may swap it (deep copies do).
  virtual std::shared_ptr<Module> shared_module(const std::string& path,
                                                const std::shared_ptr<Module>& module) {
    return module;
  }
};

std::string join_path(const std::string& prefix, const std::string& name);

template <class T> struct is_vector : std::false_type {};
template <class T, class A> struct is_vector<std::vector<T, A>> : std::true_type {};
template <class T> struct is_string_map : std::false_type {};
template <class T, class C, class A>
struct is_string_map<std::map<std::string, T, C, A>> : std::true_type {};
template <class T> struct is_optional : std::false_type {};
template <class T> struct is_optional<std::optional<T>> : std::true_type {};
template <class T> struct is_shared_ptr : std::false_type {};
template <class T> struct is_shared_ptr<std::shared_ptr<T>> : std::true_type {};
template <class> constexpr bool always_false = false;

void check_map_key(const std::string& path, const std::string& key);
void visit_module(Module& module, const std::string& path, GraphVisitor& visitor);

template <class T> void visit_node(T& node, const std::string& path, GraphVisitor& visitor) {
  if constexpr (std::is_base_of_v<Variable, T>) {
    static_assert(is_variable_kind_v<T>,
                  "NNX_FIELD: a variable kind must derive from nnx::VariableKind<Self, Base>");
    visitor.variable(path, node);
  } else if constexpr (std::is_base_of_v<Module, T>) {
    visit_module(node, path, visitor);
  } else if constexpr (is_vector<T>::value) {
    for (size_t i = 0; i < node.size(); ++i)
      visit_node(node[i], join_path(path, std::to_string(i)), visitor);
  } else if constexpr (is_string_map<T>::value) {
    for (auto& [key, value] : node) {
      check_map_key(path, key);
      visit_node(value, join_path(path, key), visitor);
    }
  } else if constexpr (is_optional<T>::value) {
    if (node) visit_node(*node, path, visitor);
  } else if constexpr (is_shared_ptr<T>::value) {
    using Pointee = typename T::element_type;
    static_assert(std::is_base_of_v<Module, Pointee>,
                  "NNX_FIELD: a shared_ptr field must point to a Module");
    if (!node) return;
    auto swapped = visitor.shared_module(path, node);
    if (swapped.get() != node.get()) node = std::static_pointer_cast<Pointee>(swapped);
    visit_node(*node, path, visitor);
  } else {
    static_assert(always_false<T>,
                  "NNX_FIELD: unsupported field type; use a Variable, a Module, or a "
                  "std::vector, std::map<std::string, T>, std::optional or std::shared_ptr "
                  "of them (plain C++ members need no NNX_FIELD)");
  }
}

struct FieldInfo {
  std::string name;  // empty: the field's entries appear directly under the module's path
  std::ptrdiff_t offset;
  void (*visit)(void* field, const std::string& path, GraphVisitor& visitor);
};

template <class T> void visit_field(void* field, const std::string& path, GraphVisitor& visitor) {
  visit_node(*static_cast<T*>(field), path, visitor);
}

template <class M> std::unique_ptr<Module> copy_module(const Module& module) {
  return std::make_unique<M>(static_cast<const M&>(module));
}

struct FieldRegistration;

}  // namespace detail

class Module {
 public:
  Module() = default;
  Module(const Module&) = default;
  Module(Module&&) = default;
  Module& operator=(const Module&) = default;
  Module& operator=(Module&&) = default;
  virtual ~Module() = default;

  // Training flag, set on this module and every submodule (Flax's model.train()/eval()).
  void train() { set_training(true); }
  void eval() { set_training(false); }
  bool is_training() const { return training_; }

  // Direct submodules (containers expanded) and every module below this one, with paths,
  // in field order; iter_modules includes this module with path "".
  std::vector<std::pair<std::string, Module*>> children();
  std::vector<std::pair<std::string, Module*>> iter_modules();
  // Demangled class name ("MLP", "Linear").
  std::string type_name() const;

  // A copy of the most-derived object that shares every variable (graph operations use it).
  std::unique_ptr<Module> shallow_copy() const;

 protected:
  // Registers a field by hand: `name` empty lists its entries directly under this module
  // (Rngs does this for its streams). NNX_FIELD calls it for you.
  template <class Self, class T> void register_field(Self* self, std::string name, T* field) {
    fields_.push_back(detail::FieldInfo{
        std::move(name),
        reinterpret_cast<const char*>(field) -
            reinterpret_cast<const char*>(static_cast<const Module*>(self)),
        &detail::visit_field<T>});
    copier_ = &detail::copy_module<Self>;
    copier_type_ = &typeid(Self);
  }

 private:
  friend void detail::visit_module(Module&, const std::string&, detail::GraphVisitor&);
  friend struct detail::FieldRegistration;
  void set_training(bool training);

  std::vector<detail::FieldInfo> fields_;
  std::unique_ptr<Module> (*copier_)(const Module&) = nullptr;
  const std::type_info* copier_type_ = nullptr;
  bool training_ = true;
};

namespace detail {
// The member NNX_FIELD adds after each field: it registers the field at construction.
struct FieldRegistration {
  template <class Self, class T> FieldRegistration(Self* self, const char* name, T* field) {
    static_cast<Module*>(self)->register_field(self, name, field);
  }
  FieldRegistration(const FieldRegistration&) {}  // copies keep the registrations they copy
  FieldRegistration& operator=(const FieldRegistration&) { return *this; }
};
}  // namespace detail

}  // namespace nnx

// Declares a field of a Module once: `nnx::Linear NNX_FIELD(fc1);` (one per declaration,
// initialized in the constructor). The field is visited by split/merge/state under "fc1".
#define NNX_FIELD(name)                                                              \
  name;                                                                              \
  [[no_unique_address]] ::nnx::detail::FieldRegistration nnx_field_##name##_ { this, #name, &name }
