// LoRA adapters.
#include <nnx/modules/detail/checked_size.h>
#include <nnx/modules/lora.h>
#include <nnx/sharding/ops.h>

namespace nnx {

LoRA::LoRA(int64_t in_features, int64_t lora_rank, int64_t out_features, Rngs& rngs,
           LoRAOptions options)
    : lora_a(options.a_initializer(rngs.params(),
                                   {detail::checked_size(in_features, "LoRA", "in_features"),
                                    detail::checked_size(lora_rank, "LoRA", "lora_rank")},
                                   options.param_dtype),
             options.a_metadata),
      lora_b(options.b_initializer(rngs.params(),
                                   {lora_rank,
                                    detail::checked_size(out_features, "LoRA", "out_features")},
                                   options.param_dtype),
             options.b_metadata) {}

Array LoRA::operator()(const Array& x) const {
  const int64_t in = lora_a.shape()[0];
  NNX_CHECK(x.ndim() >= 1 && x.shape().back() == in,
            "this LoRA takes inputs [..., {}] (in_features), got {}", in, to_string(x.shape()));
  // One example too, [in] -> [out], as x @ lora_a @ lora_b in Flax.
  return matmul(matmul(x, lora_a.value()), lora_b.value());
}

LoRALinear::LoRALinear(int64_t in_features, int64_t out_features, int64_t lora_rank, Rngs& rngs,
                       LinearOptions options, LoRAOptions lora_options)
    : Linear(in_features, out_features, rngs, std::move(options)),
      lora(in_features, lora_rank, out_features, rngs, std::move(lora_options)) {}

Array LoRALinear::operator()(const Array& x) const { return Linear::operator()(x) + lora(x); }

}  // namespace nnx
