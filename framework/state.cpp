// State container, listing and JSON.
#include <nnx/core/error.h>
#include <nnx/framework/state.h>

#include <torch/types.h>

#include <algorithm>

namespace nnx {

void State::add(std::string path, Variable variable) {
  NNX_CHECK(!contains(path), "path '{}' is already in this State", path);
  NNX_CHECK(variable.defined(), "cannot add an empty variable handle at '{}'", path);
  index_.emplace(path, entries_.size());
  entries_.emplace_back(std::move(path), std::move(variable));
}

const Variable& State::at(const std::string& path) const {
  auto it = index_.find(path);
  if (it == index_.end()) {
    std::vector<std::string> close;
    auto leaf = path.substr(path.rfind('.') == std::string::npos ? 0 : path.rfind('.') + 1);
    for (const auto& [p, v] : entries_)
      if (p.find(leaf) != std::string::npos) close.push_back(p);
    NNX_FAIL("no variable at '{}' in this State{}", path,
             close.empty() ? std::string() : fmt::format("; similar paths: {}", fmt::join(close, ", ")));
  }
  return entries_[it->second].second;
}

Variable& State::at(const std::string& path) {
  return const_cast<Variable&>(static_cast<const State&>(*this).at(path));
}

std::vector<std::string> State::paths() const {
  std::vector<std::string> out;
  for (const auto& [p, v] : entries_) out.push_back(p);
  return out;
}

State State::filter(const Filter& filter) const {
  State out;
  for (const auto& [p, v] : entries_)
    if (filter(p, v)) out.add(p, v);
  return out;
}

State State::merged_with(const State& other) const {
  State out = *this;
  for (const auto& [p, v] : other) out.add(p, v);
  return out;
}

int64_t State::numel() const {
  int64_t n = 0;
  for (const auto& [p, v] : entries_) n += v.value().numel();
  return n;
}

int64_t State::nbytes() const {
  int64_t n = 0;
  for (const auto& [p, v] : entries_)
    n += v.value().numel() * static_cast<int64_t>(c10::elementSize(v.dtype()));
  return n;
}

namespace {
std::string variable_shape_text(const Variable& v) {
  return fmt::format("{}[{}]", dtype_name(v.dtype()), fmt::join(v.shape(), ","));
}
}  // namespace

std::string State::to_string() const {
  size_t path_width = 4, kind_width = 4, shape_width = 5;
  for (const auto& [p, v] : entries_) {
    path_width = std::max(path_width, p.size());
    kind_width = std::max(kind_width, v.type().name.size());
    shape_width = std::max(shape_width, variable_shape_text(v).size());
  }
  std::string out = fmt::format("{:<{}}  {:<{}}  {:<{}}  metadata\n", "path", path_width, "kind",
                                kind_width, "value", shape_width);
  for (const auto& [p, v] : entries_) {
    auto line = fmt::format("{:<{}}  {:<{}}  {:<{}}  {}", p, path_width, v.type().name,
                            kind_width, variable_shape_text(v), shape_width, v.metadata().to_string());
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

namespace {
nlohmann::json values_json(const at::Tensor& t) {
  if (t.dim() == 0) {
    if (t.is_floating_point()) return t.item<double>();
    if (t.scalar_type() == at::kBool) return t.item<bool>();
    return t.item<int64_t>();
  }
  nlohmann::json out = nlohmann::json::array();
  for (int64_t i = 0; i < t.size(0); ++i) out.push_back(values_json(t[i]));
  return out;
}
}  // namespace

nlohmann::json State::to_json(bool with_values) const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [p, v] : entries_) {
    nlohmann::json entry{{"path", p},
                         {"kind", v.type().name},
                         {"dtype", dtype_name(v.dtype())},
                         {"shape", v.shape()},
                         {"metadata", v.metadata().to_json()}};
    const Array& value = v.value();
    if (with_values && !value.is_abstract()) {
      // As printing a jax.Array not held whole by this process: refused, not a block written
      // under the global shape.
      NNX_CHECK(value.is_fully_replicated(),
                "'{}' lies on {} as {}{}, so this rank holds a block or a pending sum, not its "
                "value; gather the values first (nnx::gather), or write the state without them",
                p, value.mesh()->to_string(), value.spec().to_string(),
                value.partial_axes().empty()
                    ? std::string()
                    : fmt::format(" summed over ({})", fmt::join(value.partial_axes(), ", ")));
      entry["value"] = values_json(v.tensor().detach().cpu());
    }
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace nnx
