// ZeRO-1 (Metadata::optimizer_sharding): a parameter's optimizer state laid out by its own spec
// with optimizer_sharding's axes added. Each replica keeps 1/data-size of the moments (Adam on 8
// data replicas: mu and nu take 2/8 of the parameter's bytes per rank instead of twice them);
// value_and_grad reduce-scatters the gradient into that layout, Optimizer::update all-gathers
// the update.
#pragma once

#include <nnx/framework/optimizer_spec.h>

namespace nnx::optim {

using nnx::optimizer_spec;  // defined with the framework: value_and_grad needs it too

}  // namespace nnx::optim
