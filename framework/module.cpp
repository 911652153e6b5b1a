// Module field walks, submodule iteration, training flags and shallow copies.
#include <nnx/core/error.h>
#include <nnx/framework/module.h>

#include <algorithm>
#include <unordered_set>

namespace nnx {

namespace detail {

std::string join_path(const std::string& prefix, const std::string& name) {
  if (prefix.empty()) return name;
  if (name.empty()) return prefix;
  return prefix + "." + name;
}

void check_map_key(const std::string& path, const std::string& key) {
  NNX_CHECK(!key.empty() && key.find('.') == std::string::npos,
            "map key '{}' under '{}' cannot be empty or contain '.': paths use '.' as separator",
            key, path);
}

void visit_module(Module& module, const std::string& path, GraphVisitor& visitor) {
  auto& open = visitor.open_modules;
  NNX_CHECK(std::find(open.begin(), open.end(), &module) == open.end(),
            "'{}' is a {} that contains itself through shared_ptr fields (a cycle); nnx walks "
            "modules as a tree whose nodes may be shared but not cyclic: hold the reference back "
            "up as a plain pointer or std::weak_ptr, without NNX_FIELD",
            path, module.type_name());
  if (!visitor.module(path, module)) return;
  open.push_back(&module);
  struct Close {
    std::vector<const Module*>& open;
    ~Close() { open.pop_back(); }
  } close{open};
  for (const auto& field : module.fields_) {
    void* address = reinterpret_cast<char*>(&module) + field.offset;
    field.visit(address, join_path(path, field.name), visitor);
  }
}

void set_copier(Module& module, ModuleCopier copier, const std::type_info& type) {
  module.copier_ = copier;
  module.copier_type_ = &type;
}

namespace {
// Collects modules below a root, optionally stopping at depth one.
class ModuleCollector : public GraphVisitor {
 public:
  explicit ModuleCollector(bool direct_only) : direct_only_(direct_only) {
    passes_unplaced = true;
  }
  void variable(const std::string&, Variable&) override {}
  bool module(const std::string& path, Module& module) override {
    if (seen_root_ && direct_only_) {
      found.emplace_back(path, &module);
      return false;
    }
    // Below the root, a module shared by several paths is listed once, at its first path (as
    // Flax's iter_modules visits each node once).
    if (!visited_.insert(&module).second) return false;
    if (seen_root_ || !direct_only_) found.emplace_back(path, &module);
    seen_root_ = true;
    return true;
  }
  std::vector<std::pair<std::string, Module*>> found;

 private:
  bool direct_only_;
  bool seen_root_ = false;
  std::unordered_set<const Module*> visited_;
};
}  // namespace

}  // namespace detail

std::vector<std::pair<std::string, Module*>> Module::children() {
  detail::ModuleCollector collector(true);
  detail::visit_module(*this, "", collector);
  return std::move(collector.found);
}

std::vector<std::pair<std::string, Module*>> Module::iter_modules() {
  detail::ModuleCollector collector(false);
  detail::visit_module(*this, "", collector);
  return std::move(collector.found);
}

namespace detail {

void FieldRegistration::check_inside(std::ptrdiff_t offset, size_t size, const char* name) {
  NNX_CHECK(offset >= 0 && static_cast<size_t>(offset) < size,
            "NNX_FIELD({}) is not a member stored in the module (a static member?); declare it "
            "as a plain non-static member",
            name);
}

void FieldRegistration::copy_from(const FieldRegistration& other) noexcept {
  name_ = other.name_;
  field_from_module_ = other.field_from_module_;
  self_from_module_ = other.self_from_module_;
  visit_ = other.visit_;
  copier_ = other.copier_;
  type_ = other.type_;
  attach();
}

void FieldRegistration::name_failed_placements(void* field) const {
  struct Naming : GraphVisitor {
    Naming() { passes_unplaced = true; }
    void variable(const std::string& path, Variable& handle) override {
      const auto& impl = VariableAccess::impl(handle);
      if (impl && !impl->placement_error.empty()) impl->placement_path = path;
    }
  } naming;
  visit_(field, std::string(name_), naming);
}

void FieldRegistration::attach() noexcept {
  auto* module = reinterpret_cast<Module*>(reinterpret_cast<char*>(this) - self_from_module_);
  module->fields_.push_back(FieldInfo{std::string(name_), field_from_module_, visit_});
  module->copier_ = copier_;
  module->copier_type_ = type_;
}

}  // namespace detail

std::string Module::type_name() const { return detail::type_display_name(typeid(*this)); }

std::unique_ptr<Module> Module::shallow_copy() const {
  NNX_CHECK(copier_ != nullptr && *copier_type_ == typeid(*this),
            "{} declares no NNX_FIELD of its own (or cannot be copied), so nnx cannot copy it "
            "through a base; pass it to split/clone as a {}, or declare a field with NNX_FIELD",
            type_name(), type_name());
  return copier_(*this);
}

void Module::set_training(bool training) {
  for (auto& [path, module] : iter_modules()) module->training_ = training;
}

}  // namespace nnx
