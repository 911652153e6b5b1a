// Gradient leaves: the selected variables' tensors, detached and requiring grad.
#include <nnx/core/error.h>
#include <nnx/framework/value_and_grad.h>

#include <torch/types.h>

namespace nnx {

namespace detail {

State prepare_grad_leaves(Module& module, const Filter& wrt) {
  State leaves = state(module, wrt);
  for (auto& [path, v] : leaves) {
    const Array& value = v.value();
    NNX_CHECK(!value.is_abstract(), "'{}' has no values (abstract); materialize the model first",
              path);
    NNX_CHECK(at::isFloatingType(value.dtype()),
              "'{}' is {} and cannot take a gradient; exclude it with the wrt filter", path,
              dtype_name(value.dtype()));
    v.set_value(value.with_local(value.local().detach().requires_grad_(true)));
  }
  return leaves;
}

}  // namespace detail
}  // namespace nnx
