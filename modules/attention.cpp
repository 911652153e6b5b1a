// Multi-head attention over the Array op set (heads stay sharded through every step).
#include <nnx/framework/error.h>
#include <nnx/modules/attention.h>
#include <nnx/sharding/ops.h>

namespace nnx {

namespace {

Shape concat(Shape a, const Shape& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

int64_t checked_head_dim(int64_t num_heads, int64_t qkv) {
  NNX_CHECK(num_heads >= 1 && qkv % num_heads == 0,
            "qkv_features ({}) must be a multiple of num_heads ({})", qkv, num_heads);
  return qkv / num_heads;
}

}  // namespace

LinearGeneral::LinearGeneral(Shape in_features, Shape out_features, Rngs& rngs, bool use_bias,
                             const AttentionOptions& options, const Metadata& kernel_metadata,
                             const Metadata& bias_metadata)
    : kernel(as_matrix(options.kernel_init, in_features.size())(
                 rngs.params(), concat(in_features, out_features), options.param_dtype),
             kernel_metadata),
      in_dims(static_cast<int64_t>(in_features.size())) {
  if (use_bias)
    bias = Param(as_matrix(options.bias_init, 0)(rngs.params(), out_features, options.param_dtype),
                 bias_metadata);
}

Array LinearGeneral::operator()(const Array& x) const {
  const Shape& k = kernel.shape();
  const int64_t in = numel(Shape(k.begin(), k.begin() + in_dims));
  const int64_t out = numel(Shape(k.begin() + in_dims, k.end()));
  Shape lead(x.shape().begin(), x.shape().end() - in_dims);
  Shape out_shape = concat(lead, Shape(k.begin() + in_dims, k.end()));
  Shape flat_x = lead;
  flat_x.push_back(in);
  Array y = matmul(reshape(x, flat_x), reshape(kernel.value(), {in, out}));
  y = reshape(y, out_shape);
  return bias ? y + bias->value() : y;
}

MultiHeadAttention::MultiHeadAttention(int64_t num_heads, int64_t in_features, Rngs& rngs,
                                       AttentionOptions o)
    : query({in_features},
            {num_heads, checked_head_dim(num_heads, o.qkv_features.value_or(in_features))}, rngs,
            o.use_bias, o, o.qkv_kernel_metadata, o.qkv_bias_metadata),
      key({in_features}, {num_heads, query.kernel.shape()[2]}, rngs, o.use_bias, o,
          o.qkv_kernel_metadata, o.qkv_bias_metadata),
      value({in_features}, {num_heads, query.kernel.shape()[2]}, rngs, o.use_bias, o,
            o.qkv_kernel_metadata, o.qkv_bias_metadata),
      out({num_heads, query.kernel.shape()[2]}, {o.out_features.value_or(in_features)}, rngs,
          o.use_bias, o, o.out_kernel_metadata, o.out_bias_metadata),
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
