// Multi-head attention over the Array op set (heads stay sharded through every step).
#include <nnx/core/error.h>
#include <nnx/modules/attention.h>
#include <nnx/sharding/ops.h>

namespace nnx {

namespace {

int64_t checked_head_dim(int64_t num_heads, int64_t qkv) {
  NNX_CHECK(num_heads >= 1 && qkv % num_heads == 0,
            "qkv_features ({}) must be a multiple of num_heads ({})", qkv, num_heads);
  return qkv / num_heads;
}

// The options of one of the four projections.
LinearGeneralOptions projection(const AttentionOptions& o, const Metadata& kernel_metadata,
                                const Metadata& bias_metadata) {
  return {.use_bias = o.use_bias, .dtype = o.dtype, .param_dtype = o.param_dtype, .kernel_init = o.kernel_init,
          .bias_init = o.bias_init, .kernel_metadata = kernel_metadata,
          .bias_metadata = bias_metadata};
}

}  // namespace

MultiHeadAttention::MultiHeadAttention(int64_t num_heads, int64_t in_features, Rngs& rngs,
                                       AttentionOptions o)
    : query({in_features},
            {num_heads, checked_head_dim(num_heads, o.qkv_features.value_or(in_features))}, rngs,
            projection(o, o.qkv_kernel_metadata, o.qkv_bias_metadata)),
      key({in_features}, {num_heads, query.kernel.shape()[2]}, rngs,
          projection(o, o.qkv_kernel_metadata, o.qkv_bias_metadata)),
      value({in_features}, {num_heads, query.kernel.shape()[2]}, rngs,
            projection(o, o.qkv_kernel_metadata, o.qkv_bias_metadata)),
      out({num_heads, query.kernel.shape()[2]}, {o.out_features.value_or(in_features)}, rngs,
          projection(o, o.out_kernel_metadata, o.out_bias_metadata)),
      num_heads(num_heads),
      head_dim(query.kernel.shape()[2]) {}

Array MultiHeadAttention::operator()(const Array& x, bool causal) const {
  return (*this)(x, x, causal);
}

Array MultiHeadAttention::operator()(const Array& inputs_q, const Array& inputs_kv,
                                     bool causal) const {
  const int64_t in = query.kernel.shape()[0];
  NNX_CHECK(inputs_q.ndim() == 3 && inputs_kv.ndim() == 3 && inputs_q.shape()[2] == in &&
                inputs_kv.shape()[2] == in,
            "inputs must be [batch, length, {}], got {} and {}", in,
            to_string(inputs_q.shape()), to_string(inputs_kv.shape()));
  // [batch, length, heads, head_dim] -> [batch, heads, length, head_dim].
  Array q = transpose(query(inputs_q), 1, 2);
  Array k = transpose(key(inputs_kv), 1, 2);
  Array v = transpose(value(inputs_kv), 1, 2);
  Array y = dot_product_attention(q, k, v, causal);
  return out(transpose(y, 1, 2));
}

}  // namespace nnx
