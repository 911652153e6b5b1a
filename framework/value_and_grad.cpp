// Gradient leaves: the selected variables' tensors, detached and requiring grad; and the
// variables written from the graph, detached after it.
#include <nnx/core/error.h>
#include <nnx/framework/gradient_reducer.h>
#include <nnx/framework/value_and_grad.h>

#include <torch/types.h>

namespace nnx {

namespace detail {

State prepare_grad_leaves(Module& module, const Filter& wrt) {
  // Inside another call's loss function, the leaves made here would cut that call's graph, and
  // its gradients would silently lose every term computed after this call.
  NNX_CHECK(!gradient_in_progress(),
            "value_and_grad, grad or accumulate was called inside another one's loss function; "
            "nested gradients are not supported (the outer gradients would silently lose terms): "
            "take the inner gradient before or after the outer call");
  State leaves = state(module, wrt);
  // Every variable is checked before any becomes a leaf: an error leaves the model as it was.
  for (auto& [path, v] : leaves) {
    const Array& value = v.value();
    NNX_CHECK(!value.is_abstract(), "'{}' has no values (abstract); materialize the model first",
              path);
    NNX_CHECK(at::isFloatingType(value.dtype()),
              "'{}' is {} and cannot take a gradient; exclude it with the wrt filter", path,
              dtype_name(value.dtype()));
  }
  for (auto& [path, v] : leaves) {
    const Array& value = v.value();
    v.set_value(value.with_local(value.local().detach().requires_grad_(true)));
  }
  return leaves;
}

void detach_written_variables(Module& module) {
  // A walk over the handles, without building a State each step.
  struct Detacher : GraphVisitor {
    void variable(const std::string&, Variable& v) override {
      if (!v.defined()) return;
      const Array& value = v.value();
      // Computed from the graph (not a leaf: the gradient leaves stay, mid-accumulation).
      if (value.defined() && value.local().requires_grad() && !value.local().is_leaf())
        v.set_value(value.with_local(value.local().detach()));
    }
  } detacher;
  visit_module(module, "", detacher);
}

}  // namespace detail
}  // namespace nnx
