// Filters select variables by kind, path or predicate, with Flax's combinators:
//   nnx::OfType<nnx::Param>, nnx::PathContains("kernel"), nnx::Any(a, b), nnx::All(a, b),
//   nnx::Not(a), nnx::Everything, nnx::Nothing, or any callable (path, variable) -> bool.
#pragma once

#include <nnx/framework/variable.h>

#include <functional>
#include <string>
#include <vector>

namespace nnx {

class Filter {
 public:
  using Predicate = std::function<bool(const std::string& path, const Variable& variable)>;

  Filter(Predicate predicate, std::string description, bool everything = false);
  // Any callable (path, variable) -> bool.
  template <class F>
    requires(!std::is_same_v<std::decay_t<F>, Filter> &&
             std::is_invocable_r_v<bool, F, const std::string&, const Variable&>)
  Filter(F predicate)  // NOLINT: implicit, as Flax accepts plain callables
      : Filter(Predicate(std::move(predicate)), "<predicate>") {}

  bool operator()(const std::string& path, const Variable& variable) const {
    return predicate_(path, variable);
  }
  const std::string& description() const { return description_; }
  // True for Everything (which split only accepts as its last filter).
  bool is_everything() const { return everything_; }

 private:
  Predicate predicate_;
  std::string description_;
  bool everything_;
};

// Matches variables whose kind is K or refines K.
template <class K>
inline const Filter OfType{
    [](const std::string&, const Variable& v) { return v.is<K>(); },
    "OfType(" + variable_type<K>().name + ")"};

// Matches when one element of the dotted path equals `name` ("kernel" in "fc1.kernel").
Filter PathContains(std::string name);

// inline: initialized before any later definition in every file that includes this header.
inline const Filter Everything{[](const std::string&, const Variable&) { return true; },
                               "Everything", true};
inline const Filter Nothing{[](const std::string&, const Variable&) { return false; }, "Nothing"};
Filter Not(Filter filter);
Filter any_of(std::vector<Filter> filters);
Filter all_of(std::vector<Filter> filters);
template <class... F> Filter Any(F... filters) { return any_of({Filter(std::move(filters))...}); }
template <class... F> Filter All(F... filters) { return all_of({Filter(std::move(filters))...}); }

}  // namespace nnx
