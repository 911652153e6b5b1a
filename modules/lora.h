// LoRA, as flax.nnx.LoRA / LoRALinear: x @ lora_a [in, rank] @ lora_b [rank, out], with
// lora_a he_uniform and lora_b zeros (lora_a key then lora_b key), as LoRAParam variables
// so that a filter can train the adapters alone: nnx::OfType<nnx::LoRAParam>.
#pragma once

#include <nnx/framework/initializers.h>
#include <nnx/framework/module.h>
#include <nnx/framework/rngs.h>
#include <nnx/modules/linear.h>

namespace nnx {

struct LoRAParam : VariableKind<LoRAParam, Param> { using VariableKind::VariableKind; };

struct LoRAOptions {
  at::ScalarType param_dtype = at::kFloat;
  Initializer a_initializer = initializers::he_uniform();
  Initializer b_initializer = initializers::zeros();
  Metadata a_metadata = {};
  Metadata b_metadata = {};
};

class LoRA : public Module {
 public:
  LoRA(int64_t in_features, int64_t lora_rank, int64_t out_features, Rngs& rngs,
       LoRAOptions options = {});
  // A temporary Rngs (Flax's rngs=nnx.Rngs(0)): its keys are drawn, then it is dropped.
  LoRA(int64_t in_features, int64_t lora_rank, int64_t out_features, Rngs&& rngs,
       LoRAOptions options = {})
      : LoRA(in_features, lora_rank, out_features, rngs, std::move(options)) {}
  Array operator()(const Array& x) const;

  LoRAParam NNX_FIELD(lora_a);
  LoRAParam NNX_FIELD(lora_b);
};

// A Linear plus a LoRA adapter: Linear's kernel and bias keys first, then the adapter's.
class LoRALinear : public Linear {
 public:
  LoRALinear(int64_t in_features, int64_t out_features, int64_t lora_rank, Rngs& rngs,
             LinearOptions options = {}, LoRAOptions lora_options = {});
  LoRALinear(int64_t in_features, int64_t out_features, int64_t lora_rank, Rngs&& rngs,
             LinearOptions options = {}, LoRAOptions lora_options = {})
      : LoRALinear(in_features, out_features, lora_rank, rngs, std::move(options),
                   std::move(lora_options)) {}
  Array operator()(const Array& x) const;

  LoRA NNX_FIELD(lora);
};

}  // namespace nnx
