// nnx::Dropout, as flax.nnx.Dropout: forks the "dropout" stream at construction (its key and
// count live in the module's state) and draws a fresh key per call in training mode; the mask
// comes from the partitionable RNG, so it is the same on every mesh.
#pragma once

#include <nnx/framework/module.h>
#include <nnx/framework/rngs.h>

namespace nnx {

class Dropout : public Module {
 public:
  Dropout(double rate, Rngs& rngs);
  // Identity in eval mode (or at rate 0).
  Array operator()(const Array& x);

  RngStream NNX_FIELD(rngs);
  double rate = 0;
};

}  // namespace nnx
