// nnx::MultiHeadAttention, as flax.nnx.MultiHeadAttention: query, key, value kernels
// [in, heads, head_dim] and out kernel [heads, head_dim, out] (LinearGeneral: lecun_normal on
// the flattened matrix), each with a bias, keys drawn query, key, value, out (kernel then bias).
// Shard the heads dim of the four kernels (e.g. P(none, "model", none)) for tensor parallelism.
#pragma once

#include <nnx/framework/initializers.h>
#include <nnx/framework/module.h>
#include <nnx/framework/rngs.h>
#include <nnx/modules/linear_general.h>

#include <optional>

namespace nnx {

struct AttentionOptions {
  std::optional<int64_t> qkv_features;  // default in_features
  std::optional<int64_t> out_features;  // default in_features
  bool use_bias = true;
  // Compute dtype (Flax's `dtype`): inputs and parameters are cast to it; none computes in theirs.
  std::optional<at::ScalarType> dtype;
  at::ScalarType param_dtype = at::kFloat;
  Initializer kernel_init = initializers::lecun_normal();
  Initializer bias_init = initializers::zeros();
  Metadata qkv_kernel_metadata = {};  // for query, key and value: [in, heads, head_dim]
  Metadata qkv_bias_metadata = {};    // [heads, head_dim]
  Metadata out_kernel_metadata = {};  // [heads, head_dim, out]
  Metadata out_bias_metadata = {};    // [out]
};

class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(int64_t num_heads, int64_t in_features, Rngs& rngs,
                     AttentionOptions options = {});
  // A temporary Rngs (Flax's rngs=nnx.Rngs(0)): its keys are drawn, then it is dropped.
  MultiHeadAttention(int64_t num_heads, int64_t in_features, Rngs&& rngs,
                     AttentionOptions options = {})
      : MultiHeadAttention(num_heads, in_features, rngs, std::move(options)) {}

  // Self-attention of x [batch, length, in_features]; causal masks future positions.
  Array operator()(const Array& x, bool causal = false) const;
  // Attention of queries from inputs_q over keys and values from inputs_kv.
  Array operator()(const Array& inputs_q, const Array& inputs_kv, bool causal) const;

  LinearGeneral NNX_FIELD(query);
  LinearGeneral NNX_FIELD(key);
  LinearGeneral NNX_FIELD(value);
  LinearGeneral NNX_FIELD(out);
  int64_t num_heads = 1;
  int64_t head_dim = 1;
};

}  // namespace nnx
