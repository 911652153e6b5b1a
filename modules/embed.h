// nnx::Embed, as flax.nnx.Embed: a table [num_embeddings, features] initialized with
// variance_scaling(1, fan_in, normal, out_axis=0); attend() is the tied output projection.
#pragma once

#include <nnx/framework/initializers.h>
#include <nnx/framework/module.h>
#include <nnx/framework/rngs.h>

#include <optional>

namespace nnx {

struct EmbedOptions {
  // Compute dtype (Flax's `dtype`): inputs and parameters are cast to it; none computes in theirs.
  std::optional<at::ScalarType> dtype;
  at::ScalarType param_dtype = at::kFloat;
  Initializer embedding_init = initializers::variance_scaling(
      1.0, initializers::FanMode::fan_in, initializers::Distribution::normal, {.out_axis = {0}});
  Metadata embedding_metadata = {};  // e.g. {.out_sharding = P("vocab", "embed")}
};

class Embed : public Module {
 public:
  Embed(int64_t num_embeddings, int64_t features, Rngs& rngs, EmbedOptions options = {});
  // A temporary Rngs (Flax's rngs=nnx.Rngs(0)): its keys are drawn, then it is dropped.
  Embed(int64_t num_embeddings, int64_t features, Rngs&& rngs, EmbedOptions options = {})
      : Embed(num_embeddings, features, rngs, std::move(options)) {}

  // Rows of the table for integer ids [...] -> [..., features].
  Array operator()(const Array& ids) const;
  // query [..., features] @ table^T -> [..., num_embeddings].
  Array attend(const Array& query) const;

  Param NNX_FIELD(embedding);
  std::optional<at::ScalarType> dtype;
};

}  // namespace nnx
