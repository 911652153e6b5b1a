// split/merge/state/update/clone/pop over the module graph.
#include <nnx/core/error.h>
#include <nnx/framework/graph.h>
#include <nnx/sharding/redistribute.h>

#include <torch/types.h>
#include <torch/utils.h>

#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace nnx {
namespace detail {

namespace {

struct Slot {
  std::string path;
  Variable* handle;
};

// Every defined variable handle under a module, with its path (shared ones once per path).
class HandleCollector : public GraphVisitor {
 public:
  void variable(const std::string& path, Variable& handle) override {
    if (handle.defined()) slots.push_back({path, &handle});
  }
  std::vector<Slot> slots;
};

std::vector<Slot> collect(const Module& module) {
  HandleCollector collector;
  visit_module(const_cast<Module&>(module), "", collector);
  return std::move(collector.slots);
}

using ImplPtr = std::shared_ptr<VariableImpl>;

// Rebinds the handles of a fresh shallow copy to new variables made by `make`, keeping
// variables and shared_ptr modules that were shared shared.
class Remapper : public GraphVisitor {
 public:
  using Make = std::function<ImplPtr(const std::string& path, const Variable& old)>;
  explicit Remapper(Make make) : make_(std::move(make)) {}

  void variable(const std::string& path, Variable& handle) override {
    if (!handle.defined() || produced_.count(handle.id())) return;
    auto it = done_.find(handle.id());
    if (it == done_.end()) {
      auto fresh = make_(path, handle);
      produced_.insert(fresh.get());
      it = done_.emplace(handle.id(), std::move(fresh)).first;
    }
    VariableAccess::reset(handle, it->second);
  }

  std::shared_ptr<Module> shared_module(const std::string&, const std::shared_ptr<Module>& module,
                                        ModuleCopier copy_module) override {
    if (copies_made_.count(module.get())) return module;
    auto it = module_copies_.find(module.get());
    if (it == module_copies_.end()) {
      std::shared_ptr<Module> copy = copy_module(*module);
      copies_made_.insert(copy.get());
      it = module_copies_.emplace(module.get(), std::move(copy)).first;
    }
    return it->second;
  }

 private:
  Make make_;
  std::unordered_map<const void*, ImplPtr> done_;
  std::unordered_set<const void*> produced_;
  std::unordered_map<const Module*, std::shared_ptr<Module>> module_copies_;
  std::unordered_set<const Module*> copies_made_;
};

std::unique_ptr<Module> remapped_copy(std::unique_ptr<Module> copy, Remapper::Make make) {
  Remapper remapper(std::move(make));
  visit_module(*copy, "", remapper);
  return copy;
}

std::string describe_filters(const std::vector<Filter>& filters) {
  std::vector<std::string> parts;
  for (const auto& f : filters) parts.push_back(f.description());
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string value_text(const Variable& v) {
  if (!v.value().defined()) return "<empty>";
  return fmt::format("{}{}", dtype_name(v.dtype()), to_string(v.shape()));
}

// The layout text of an array for errors: "PartitionSpec('a', None) on Mesh('a': 2, 'b': 2)".
std::string layout_text(const Array& a) {
  if (!a.mesh()) return "a whole array on no mesh";
  std::string out = a.spec().to_string() + " on " + a.mesh()->to_string();
  if (!a.partial_axes().empty()) out += fmt::format(" (pending sum over {})", fmt::join(a.partial_axes(), ", "));
  return out;
}

// Why `from` cannot be laid out as `to` (different meshes), if it cannot.
std::optional<std::string> relayout_problem(const Array& to, const Array& from) {
  if (!to.defined() || to.is_abstract() || !from.defined() || from.is_abstract()) return {};
  if (to.mesh() && from.mesh() && !(*to.mesh() == *from.mesh()))
    return fmt::format("the value is {} but the variable is {}; restore or redistribute it onto "
                       "the variable's mesh first", layout_text(from), layout_text(to));
  return {};
}

// `from`'s values as this process's block of `to`'s layout (a collective when they differ).
at::Tensor in_layout_of(const Array& to, const Array& from) {
  const bool same = (to.mesh() == nullptr) == (from.mesh() == nullptr) &&
                    (!to.mesh() || (*to.mesh() == *from.mesh() && to.spec() == from.spec() &&
                                    to.partial_axes() == from.partial_axes()));
  if (same) return from.local();
  if (!to.mesh()) return gather(from);                         // sharded into a whole array
  if (!from.mesh()) {  // a whole array (the same on every process) into blocks
    Array placed = device_put(from.local(), NamedSharding{to.mesh(), to.spec()});
    if (to.partial_axes().empty()) return placed.local();
    return redistribute(placed, NamedSharding{to.mesh(), to.spec()}, to.partial_axes()).local();
  }
  return redistribute(from, NamedSharding{to.mesh(), to.spec()}, to.partial_axes()).local();
}

}  // namespace

GraphDefBase::GraphDefBase(const Module& module, ModuleCopier copy)
    : skeleton_(remapped_copy(copy(module), [](const std::string&, const Variable& old) {
        const Array& value = old.value();
        Array placeholder = value.defined() ? Array::abstract(value.shape(), value.dtype()) : Array();
        if (value.defined()) placeholder.set_sharding(value.sharding());
        return std::make_shared<VariableImpl>(VariableImpl{placeholder, old.metadata(), &old.type()});
      })),
      copy_(copy) {}

nlohmann::json GraphDefBase::to_json() const {
  class JsonVisitor : public GraphVisitor {
   public:
    bool module(const std::string& path, Module& module) override {
      modules.push_back({{"path", path}, {"type", module.type_name()}});
      return true;
    }
    void variable(const std::string& path, Variable& handle) override {
      if (!handle.defined()) return;
      auto [it, fresh] = first_path.emplace(handle.id(), path);
      nlohmann::json entry{{"path", path}, {"kind", handle.type().name}};
      if (!fresh) {
        entry["shared_with"] = it->second;
      } else if (handle.value().defined()) {
        entry["dtype"] = dtype_name(handle.dtype());
        entry["shape"] = handle.shape();
        entry["metadata"] = handle.metadata().to_json();
      }
      variables.push_back(std::move(entry));
    }
    nlohmann::json modules = nlohmann::json::array();
    nlohmann::json variables = nlohmann::json::array();
    std::unordered_map<const void*, std::string> first_path;
  } visitor;
  visit_module(const_cast<Module&>(*skeleton_), "", visitor);
  return {{"type", skeleton_->type_name()},
          {"modules", std::move(visitor.modules)},
          {"variables", std::move(visitor.variables)}};
}

std::vector<State> split_states(const Module& module, const std::vector<Filter>& filters,
                                bool exhaustive, const char* who) {
  for (size_t i = 0; i + 1 < filters.size(); ++i)
    if (filters[i].is_everything())
      throw_error(who, fmt::format("nnx::Everything can only be the last filter; got filters ({})",
                                   describe_filters(filters)));
  std::vector<State> states(filters.size());
  std::unordered_set<const void*> seen;
  std::vector<std::string> unmatched;
  for (const auto& [path, handle] : collect(module)) {
    if (!seen.insert(handle->id()).second) continue;
    size_t k = 0;
    while (k < filters.size() && !filters[k](path, *handle)) ++k;
    if (k < filters.size()) states[k].add(path, *handle);
    else if (exhaustive) unmatched.push_back(fmt::format("{} ({})", path, handle->type().name));
  }
  if (!unmatched.empty())
    throw_error(who, fmt::format("filters ({}) do not cover {} variable(s): {}; add nnx::Everything "
                                 "as the last filter to take the rest",
                                 describe_filters(filters), unmatched.size(),
                                 fmt::join(unmatched, ", ")));
  return states;
}

std::unique_ptr<Module> merge_states(const GraphDefBase& graphdef,
                                     const std::vector<const State*>& states) {
  std::unordered_map<std::string, const Variable*> given;
  std::vector<std::string> errors;
  for (const State* state : states)
    for (const auto& [path, variable] : *state)
      if (!given.emplace(path, &variable).second)
        errors.push_back(fmt::format("{}: given by more than one State", path));
  // Every path of each variable: a tied variable has several, and a State may name it by any
  // one of them (as update accepts), but by one only.
  std::unordered_map<std::string, std::vector<std::string>> paths_of;  // from the first path
  std::unordered_map<const void*, std::string> first_path;
  for (const auto& [path, handle] : collect(graphdef.skeleton())) {
    auto [first, fresh] = first_path.emplace(handle->id(), path);
    paths_of[first->second].push_back(path);
  }
  std::unordered_set<std::string> used;
  auto merged = remapped_copy(graphdef.copy_skeleton(), [&](const std::string& path,
                                                      const Variable& placeholder) {
    auto known = paths_of.find(path);
    const std::vector<std::string> aliases =
        known != paths_of.end() ? known->second : std::vector<std::string>{path};
    auto it = given.end();
    for (const auto& alias : aliases) {
      auto found = given.find(alias);
      if (found == given.end()) continue;
      if (it != given.end())
        errors.push_back(fmt::format("{}: the same variable as {} (shared), given under both "
                                     "paths; give it once", alias, it->first));
      else
        it = found;
      used.insert(alias);
    }
    auto keep = std::make_shared<VariableImpl>(*VariableAccess::impl(placeholder));
    if (it == given.end()) {
      errors.push_back(fmt::format("{}: missing ({} {} expected{})", path,
                                   placeholder.type().name, value_text(placeholder),
                                   aliases.size() > 1 ? fmt::format("; shared with {}",
                                                                    fmt::join(aliases.begin() + 1,
                                                                              aliases.end(), ", "))
                                                      : std::string()));
      return keep;
    }
    const Variable& v = *it->second;
    if (&v.type() != &placeholder.type())
      errors.push_back(fmt::format("{}: kind {} where the GraphDef has {}", path, v.type().name,
                                   placeholder.type().name));
    const Array& want = placeholder.value();
    if (want.defined() && (!v.value().defined() || v.shape() != want.shape() ||
                           v.dtype() != want.dtype()))
      errors.push_back(fmt::format("{}: {} where the GraphDef has {}", path, value_text(v),
                                   value_text(placeholder)));
    return std::make_shared<VariableImpl>(VariableImpl{v.value(), v.metadata(), &placeholder.type()});
  });
  for (const auto& [path, variable] : given)
    if (!used.count(path))
      errors.push_back(fmt::format("{}: not a variable of {} (unknown path)", path,
                                   graphdef.skeleton().type_name()));
  if (!errors.empty())
    throw_error("merge", fmt::format("the States do not fit the GraphDef of {} ({} problem(s)):{}",
                                     graphdef.skeleton().type_name(), errors.size(),
                                     indented_list(errors)));
  return merged;
}

void update_states(Module& module, const std::vector<const State*>& states) {
  std::unordered_map<std::string, Variable*> slots;
  for (const auto& [path, handle] : collect(module)) slots.emplace(path, handle);
  std::vector<std::string> errors;
  std::vector<std::pair<Variable*, const Variable*>> writes;
  std::unordered_set<std::string> given;
  for (const State* state : states)
    for (const auto& [path, variable] : *state) {
      if (!given.insert(path).second) {
        errors.push_back(fmt::format("{}: given by more than one State", path));
        continue;
      }
      auto it = slots.find(path);
      if (it == slots.end()) {
        errors.push_back(fmt::format("{}: not a variable of {} (unknown path)", path,
                                     module.type_name()));
        continue;
      }
      const Variable& target = *it->second;
      if (target.value().defined() &&
          (!variable.value().defined() || variable.shape() != target.shape() ||
           variable.dtype() != target.dtype()))
        errors.push_back(fmt::format("{}: {} given for a variable of {}", path,
                                     value_text(variable), value_text(target)));
      if (&variable.type() != &target.type())
        errors.push_back(fmt::format("{}: kind {} given for a {}", path, variable.type().name,
                                     target.type().name));
      if (auto problem = relayout_problem(target.value(), variable.value()))
        errors.push_back(fmt::format("{}: {}", path, *problem));
      writes.emplace_back(it->second, &variable);
    }
  if (!errors.empty())
    throw_error("update", fmt::format("nothing was updated: {} problem(s):{}", errors.size(),
                                      indented_list(errors)));
  torch::NoGradGuard no_grad;
  // A source that is also written (a swap of two variables, a shift along a stack of blocks) is
  // read before any write: the values are the State's as given, as in Flax.
  std::unordered_set<const void*> written;
  auto storage_of = [](const Array& a) -> const void* {
    return a.defined() && !a.is_abstract() ? a.local().storage().data() : nullptr;
  };
  for (auto [target, source] : writes)
    if (!target->same_as(*source) && storage_of(target->value()) != nullptr)
      written.insert(storage_of(target->value()));
  std::vector<Array> sources;
  for (auto [target, source] : writes) {
    Array from = source->value();
    if (!target->same_as(*source) && written.count(storage_of(from)) != 0)
      from = from.with_local(from.local().clone());
    sources.push_back(std::move(from));
  }
  for (size_t w = 0; w < writes.size(); ++w) {
    auto [target, source] = writes[w];
    if (target->same_as(*source)) continue;
    const Array& to = target->value();
    const Array& from = sources[w];
    if (to.defined() && !to.is_abstract() && !from.is_abstract())
      to.local().copy_(in_layout_of(to, from));  // the target keeps its layout
    else
      target->set_value(from);
    target->metadata() = source->metadata();
  }
}

std::unique_ptr<Module> clone_module(const Module& module, ModuleCopier copy_module) {
  return remapped_copy(copy_module(module), [](const std::string&, const Variable& old) {
    const Array& value = old.value();
    Array copy = value;
    if (value.defined() && !value.is_abstract()) {
      const at::Tensor& t = value.local();
      copy = value.with_local(t.detach().clone().requires_grad_(t.requires_grad()));
    }
    return std::make_shared<VariableImpl>(VariableImpl{copy, old.metadata(), &old.type()});
  });
}

std::vector<State> pop_states(Module& module, const std::vector<Filter>& filters) {
  auto states = split_states(module, filters, false, "pop");
  std::unordered_set<const void*> popped;
  for (const auto& state : states)
    for (const auto& [path, variable] : state) popped.insert(variable.id());
  for (const auto& [path, handle] : collect(module))
    if (popped.count(handle->id())) VariableAccess::reset(*handle, nullptr);
  return states;
}

}  // namespace detail

nlohmann::json to_json(const detail::GraphDefBase& graphdef, const State& state,
                       bool with_values) {
  return {{"graphdef", graphdef.to_json()}, {"state", state.to_json(with_values)}};
}

}  // namespace nnx
