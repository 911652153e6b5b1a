// VariableType: the runtime identity of a variable kind (Param, BatchStat, user kinds...),
// its name and the kind it refines, so that a filter on Param also matches LoRAParam.
#pragma once

#include <string>
#include <typeinfo>

namespace nnx {

struct VariableType {
  std::string name;                      // "Param", "mylib::LoRAParam"
  const VariableType* parent = nullptr;  // the refined kind; null for Variable itself
  // True when this kind is `other` or refines it.
  bool is_a(const VariableType& other) const;
};

namespace detail {
// Demangled C++ name without the leading "nnx::".
std::string type_display_name(const std::type_info& type);
}  // namespace detail

}  // namespace nnx
