// nnx::Dropout, as flax.nnx.Dropout: forks its stream ("dropout") at construction (its key and
// count live in the module's state) and draws a fresh key per call in training mode; the mask
// comes from the partitionable RNG, so it is the same on every mesh.
#pragma once

#include <nnx/framework/module.h>
#include <nnx/framework/rngs.h>

#include <string>

namespace nnx {

struct DropoutOptions {
  bool deterministic = false;              // true: the identity, in training mode too
  std::string rng_collection = "dropout";  // the Rngs stream it forks (default when absent)
};

class Dropout : public Module {
 public:
  Dropout(double rate, Rngs& rngs, DropoutOptions options = {});
  // A temporary Rngs (Flax's rngs=nnx.Rngs(0)): its keys are drawn, then it is dropped.
  Dropout(double rate, Rngs&& rngs, DropoutOptions options = {})
      : Dropout(rate, rngs, std::move(options)) {}
  // Identity in eval mode, when deterministic, or at rate 0.
  Array operator()(const Array& x);

  RngStream NNX_FIELD(rngs);
  double rate = 0;
  bool deterministic = false;
};

}  // namespace nnx
