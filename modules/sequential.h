// nnx::Sequential, as flax.nnx.Sequential: layers called in order, each output the next input.
// Entries are modules (paths "layers.0.kernel") or plain functions Array -> Array (no state).
// Build it with braces so the layers are constructed, and draw their keys, left to right:
//   nnx::Sequential model{nnx::Linear(4, 8, rngs), nnx::relu, nnx::Linear(8, 2, rngs)};
// A Sequential nests in another; layers that update their state when called (BatchNorm,
// Dropout) update it through the call, as in Flax.
#pragma once

#include <nnx/core/error.h>
#include <nnx/sharding/array.h>
#include <nnx/framework/module.h>

#include <functional>
#include <string>
#include <typeinfo>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace nnx {

namespace detail {
template <class T>
struct is_std_function : std::false_type {};
template <class R, class... Args>
struct is_std_function<std::function<R(Args...)>> : std::true_type {};
// Whether a step given as a function pointer or std::function holds nothing to call.
template <class T>
bool empty_step(const T& step) {
  if constexpr (std::is_pointer_v<T> || is_std_function<T>::value) return step == nullptr;
  return false;
}
}  // namespace detail

class Sequential : public Module {
 public:
  // Not for one Sequential alone: that is the copy or move constructor.
  template <class... Layers>
    requires(sizeof...(Layers) != 1 ||
             (!std::is_base_of_v<Sequential, std::remove_cvref_t<Layers>> && ...))
  explicit Sequential(Layers&&... layers) {
    (append(std::forward<Layers>(layers)), ...);
  }

  Array operator()(const Array& x) const;
  size_t size() const { return steps_.size(); }
  // Layer i as its type: `model.get<nnx::Linear>(0).kernel`. An error names the index and the
  // layer's actual type when it is another (or a function step).
  template <class M> M& get(size_t i) {
    static_assert(std::is_base_of_v<Module, M>, "Sequential::get<M>: M must be a module type");
    M* layer = i < layers.size() ? dynamic_cast<M*>(layers[i].get()) : nullptr;
    if (layer == nullptr) fail_get(i, detail::type_display_name(typeid(M)));
    return *layer;
  }
  template <class M> const M& get(size_t i) const { return const_cast<Sequential*>(this)->get<M>(i); }

  // One entry per step; null for a function step.
  std::vector<std::shared_ptr<Module>> NNX_FIELD(layers);

 private:
  using Step = std::function<Array(Module*, const Array&)>;
  [[noreturn]] void fail_get(size_t i, const std::string& wanted) const;

  template <class L> void append(L&& layer) {
    using T = std::decay_t<L>;
    if constexpr (std::is_base_of_v<Module, T>) {
      static_assert(std::is_invocable_r_v<Array, T&, const Array&>,
                    "nnx::Sequential: a module step must be callable as Array(const Array&)");
      layers.push_back(std::make_shared<T>(std::forward<L>(layer)));
      // Copied through its base later (split, clone), as a T even where T declares no field.
      if constexpr (detail::copyable_module_v<T>)
        detail::set_copier(*layers.back(), &detail::copy_module<T>, typeid(T));
      // The step receives the module it runs, so copies of the Sequential call their own layers.
      steps_.push_back([](Module* m, const Array& x) { return (*static_cast<T*>(m))(x); });
    } else {
      static_assert(std::is_invocable_r_v<Array, const T&, const Array&>,
                    "nnx::Sequential: a step must be a module or a function Array(const Array&)");
      NNX_CHECK(!detail::empty_step(T(layer)), "step {} of this Sequential is an empty "
                "function; pass a module or a callable", steps_.size());
      layers.push_back(nullptr);
      steps_.push_back([fn = T(std::forward<L>(layer))](Module*, const Array& x) { return fn(x); });
    }
  }

  std::vector<Step> steps_;
};

}  // namespace nnx
