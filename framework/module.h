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
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

namespace nnx {

class Module;

namespace detail {

using ModuleCopier = std::unique_ptr<Module> (*)(const Module&);
// Copies a module known to be an M: through M's copy constructor when M is its exact type,
// else through the copier its most-derived type registered.
template <class M> std::unique_ptr<Module> copy_as(const Module& module);
// Makes `copier` the way to copy `module` through a base: for a module of type M known where it
// is made (a Sequential's layer) whose own NNX_FIELDs, if any, could not register M.
void set_copier(Module& module, ModuleCopier copier, const std::type_info& type);

// What a walk over a module graph sees: every variable handle, every module, in field order.
class GraphVisitor {
 public:
  virtual ~GraphVisitor() = default;
  // True for walks that never read values (naming, module lists): they pass variables whose
  // placement failed instead of raising that error.
  bool passes_unplaced = false;
  virtual void variable(const std::string& path, Variable& handle) = 0;
  // Returns false to skip the module's fields.
  virtual bool module(const std::string& path, Module& module) { return true; }
  // A module held through a shared_ptr: the visitor may swap it (deep copies do).
  virtual std::shared_ptr<Module> shared_module(const std::string& path,
                                                const std::shared_ptr<Module>& module,
                                                ModuleCopier copy) {
    return module;
  }
  // The modules being visited, outermost first (a module met again among them is a cycle).
  std::vector<const Module*> open_modules;
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
    if (!visitor.passes_unplaced) raise_if_unplaced(path, node);
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
    auto swapped = visitor.shared_module(path, node, &copy_as<Pointee>);
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

template <class M> constexpr bool copyable_module_v =
    std::is_copy_constructible_v<M> && !std::is_abstract_v<M>;

template <class M> std::unique_ptr<Module> copy_module(const Module& module) {
  auto copy = std::make_unique<M>(static_cast<const M&>(module));
  set_copier(*copy, &copy_module<M>, typeid(M));  // copies of copies too
  return copy;
}

class FieldRegistration;

}  // namespace detail

class Module {
 public:
  Module() = default;
  // Copies take the training flag; fields register themselves again in the copy, so a copy
  // (even a sliced one) knows exactly the fields of its own type.
  Module(const Module& other) : training_(other.training_) {}
  Module(Module&& other) noexcept : training_(other.training_) {}
  Module& operator=(const Module& other) {
    training_ = other.training_;
    return *this;
  }
  Module& operator=(Module&& other) noexcept {
    training_ = other.training_;
    return *this;
  }
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

 private:
  friend void detail::visit_module(Module&, const std::string&, detail::GraphVisitor&);
  friend class detail::FieldRegistration;
  friend void detail::set_copier(Module&, detail::ModuleCopier, const std::type_info&);
  void set_training(bool training);

  std::vector<detail::FieldInfo> fields_;
  detail::ModuleCopier copier_ = nullptr;
  const std::type_info* copier_type_ = nullptr;
  bool training_ = true;
};

namespace detail {

// The member NNX_FIELD adds after each field. It keeps where its field and its module lie
// relative to itself, and registers the field with the module whenever it is constructed,
// copied or moved.
class FieldRegistration {
 public:
  template <class Self, class T> FieldRegistration(Self* self, const char* name, T* field) {
    auto* module = static_cast<Module*>(self);
    std::string_view n(name);
    while (n.size() > 1 && n.back() == '_') n.remove_suffix(1);  // kernel_ -> "kernel"
    name_ = n;
    field_from_module_ = address(field) - address(module);
    self_from_module_ = address(this) - address(module);
    check_inside(field_from_module_, sizeof(Self), name);
    visit_ = &visit_field<T>;
    if constexpr (copyable_module_v<Self>) copier_ = &copy_module<Self>;
    type_ = &typeid(Self);
    attach();
    if (placement_failures() > 0) name_failed_placements(field);
  }
  FieldRegistration(const FieldRegistration& other) noexcept { copy_from(other); }
  FieldRegistration& operator=(const FieldRegistration&) noexcept { return *this; }

 private:
  static const char* address(const void* p) { return static_cast<const char*>(p); }
  static void check_inside(std::ptrdiff_t offset, size_t size, const char* name);
  void copy_from(const FieldRegistration& other) noexcept;
  void attach() noexcept;
  // Gives variables below the field whose placement failed their path from this module.
  void name_failed_placements(void* field) const;

  std::string_view name_;
  std::ptrdiff_t field_from_module_ = 0;
  std::ptrdiff_t self_from_module_ = 0;
  void (*visit_)(void*, const std::string&, GraphVisitor&) = nullptr;
  ModuleCopier copier_ = nullptr;
  const std::type_info* type_ = nullptr;
};

template <class M> std::unique_ptr<Module> copy_as(const Module& module) {
  if constexpr (copyable_module_v<M>)
    if (typeid(module) == typeid(M)) return copy_module<M>(module);
  return module.shallow_copy();
}

}  // namespace detail

}  // namespace nnx

// Declares a field of a Module once: `nnx::Linear NNX_FIELD(fc1);` (one per declaration,
// initialized in the constructor). The field is visited by split/merge/state under "fc1".
#define NNX_FIELD(name)                                                                   \
  name;                                                                                   \
  static_assert(!std::is_reference_v<decltype(name)>,                                     \
                "NNX_FIELD: a reference cannot be a field; hold a value or a std::shared_ptr"); \
  ::nnx::detail::FieldRegistration nnx_field_##name##_ { this, #name, &name }
