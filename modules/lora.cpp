// LoRA adapters.
#include <nnx/modules/lora.h>
#include <nnx/sharding/ops.h>

namespace nnx {

LoRA::LoRA(int64_t in_features, int64_t lora_rank, int64_t out_features, Rngs& rngs,
           LoRAOptions options)
    : lora_a(options.a_initializer(rngs.params(), {in_features, lora_rank}, options.param_dtype),
             options.a_metadata),
      lora_b(options.b_initializer(rngs.params(), {lora_rank, out_features}, options.param_dtype),
             options.b_metadata) {}

Array LoRA::operator()(const Array& x) const {
  return matmul(matmul(x, lora_a.value()), lora_b.value());
}

LoRALinear::LoRALinear(int64_t in_features, int64_t out_features, int64_t lora_rank, Rngs& rngs,
                       LinearOptions options, LoRAOptions lora_options)
    : Linear(in_features, out_features, rngs, std::move(options)),
      lora(in_features, lora_rank, out_features, rngs, std::move(lora_options)) {}

Array LoRALinear::operator()(const Array& x) const { return Linear::operator()(x) + lora(x); }

}  // namespace nnx
