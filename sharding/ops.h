// The op set on Arrays: model code written as if for one device runs on any mesh. Each op has
// a sharding rule: it moves its inputs to a layout it can compute locally (cheapest collectives
// first), computes on local blocks with LibTorch (so autograd flows), and says how the output
// lies. Ops with no rule for the inputs at hand gather to Replicate and count a fallback.
#pragma once

#include <nnx/sharding/array.h>
#include <nnx/core/random.h>

#include <array>
#include <limits>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

namespace nnx {

// Elementwise, with NumPy broadcasting and jax.numpy's result dtypes (README, "Dtypes").
// Scalars are replicated constants: a whole double acts as an int, a fractional one as a float.
Array add(const Array& a, const Array& b);
Array sub(const Array& a, const Array& b);
Array mul(const Array& a, const Array& b);
Array div(const Array& a, const Array& b);
// jnp.maximum and jnp.minimum, elementwise with broadcasting (at a tie each side takes half the
// gradient, as in JAX).
Array maximum(const Array& a, const Array& b);
Array minimum(const Array& a, const Array& b);
Array add(const Array& a, double b);
Array mul(const Array& a, double b);
Array neg(const Array& a);
Array exp(const Array& a);
Array log(const Array& a);
Array tanh(const Array& a);
Array relu(const Array& a);
// jax.nn.gelu: the tanh approximation by default, as JAX's; approximate = false: the erf form.
Array gelu(const Array& a, bool approximate = true);
Array silu(const Array& a);
Array sigmoid(const Array& a);
Array square(const Array& a);
Array rsqrt(const Array& a);
// jnp.power with a scalar exponent.
Array power(const Array& a, double exponent);
Array sqrt(const Array& a);
Array abs(const Array& a);
Array sin(const Array& a);
Array cos(const Array& a);
// jax.nn.softplus, log(1 + e^x), and jax.nn.log_sigmoid, -softplus(-x): stable for large |x|.
Array softplus(const Array& a);
Array log_sigmoid(const Array& a);
// jnp.clip: each value held within [min, max]; a bound left out does not apply.
Array clip(const Array& a, std::optional<double> min, std::optional<double> max = {});

// Comparisons (jnp.equal, jnp.less, ...): bool arrays, elementwise with broadcasting; no
// gradient flows through them. Pending sums resolve first.
Array equal(const Array& a, const Array& b);
Array not_equal(const Array& a, const Array& b);
Array less(const Array& a, const Array& b);
Array less_equal(const Array& a, const Array& b);
Array greater(const Array& a, const Array& b);
Array greater_equal(const Array& a, const Array& b);
Array equal(const Array& a, double b);
Array not_equal(const Array& a, double b);
Array less(const Array& a, double b);
Array less_equal(const Array& a, double b);
Array greater(const Array& a, double b);
Array greater_equal(const Array& a, double b);
// Truth of each value (nonzero is true), combined elementwise, as jnp.logical_and and friends.
Array logical_and(const Array& a, const Array& b);
Array logical_or(const Array& a, const Array& b);
Array logical_not(const Array& a);
Array isfinite(const Array& a);
Array isnan(const Array& a);
// jnp.where: x where `condition` holds (nonzero), else y, all three broadcast together; the
// result takes x's and y's promoted dtype, and the gradient flows to the side each value came
// from.
Array where(const Array& condition, const Array& x, const Array& y);
Array where(const Array& condition, const Array& x, double y);
Array where(const Array& condition, double x, const Array& y);

inline Array operator+(const Array& a, const Array& b) { return add(a, b); }
inline Array operator-(const Array& a, const Array& b) { return sub(a, b); }
inline Array operator*(const Array& a, const Array& b) { return mul(a, b); }
inline Array operator/(const Array& a, const Array& b) { return div(a, b); }
inline Array operator+(const Array& a, double b) { return add(a, b); }
inline Array operator-(const Array& a, double b) { return add(a, -b); }
inline Array operator*(const Array& a, double b) { return mul(a, b); }
inline Array operator*(double a, const Array& b) { return mul(b, a); }
inline Array operator/(const Array& a, double b) { return mul(a, 1.0 / b); }
inline Array operator-(const Array& a) { return neg(a); }
// Elementwise comparisons, as in JAX and PyTorch: `x > 0` is a bool array, not a bool.
inline Array operator==(const Array& a, const Array& b) { return equal(a, b); }
inline Array operator!=(const Array& a, const Array& b) { return not_equal(a, b); }
inline Array operator<(const Array& a, const Array& b) { return less(a, b); }
inline Array operator<=(const Array& a, const Array& b) { return less_equal(a, b); }
inline Array operator>(const Array& a, const Array& b) { return greater(a, b); }
inline Array operator>=(const Array& a, const Array& b) { return greater_equal(a, b); }
inline Array operator==(const Array& a, double b) { return equal(a, b); }
inline Array operator!=(const Array& a, double b) { return not_equal(a, b); }
inline Array operator<(const Array& a, double b) { return less(a, b); }
inline Array operator<=(const Array& a, double b) { return less_equal(a, b); }
inline Array operator>(const Array& a, double b) { return greater(a, b); }
inline Array operator>=(const Array& a, double b) { return greater_equal(a, b); }

// Reductions over dims (negative dims count from the end); a sharded dim reduces locally and
// leaves a pending sum (sum, mean) or gathers first (max, min, argmax, argmin).
Array sum(const Array& a, std::vector<int64_t> dims = {}, bool keepdim = false);
Array mean(const Array& a, std::vector<int64_t> dims = {}, bool keepdim = false);
// max and min split the gradient evenly among tied values (as JAX; LibTorch's max(dim) gives it
// to one). argmax and argmin: the first index of the extreme value (NaN counts as extreme), int64.
Array max(const Array& a, int64_t dim, bool keepdim = false);
Array min(const Array& a, int64_t dim, bool keepdim = false);
Array argmax(const Array& a, int64_t dim, bool keepdim = false);
Array argmin(const Array& a, int64_t dim, bool keepdim = false);
Array softmax(const Array& a, int64_t dim = -1);
Array log_softmax(const Array& a, int64_t dim = -1);

// Contractions: a [..., m, k] @ b [..., k, n] (b may be 2-d; a vector operand, either side, as
// jnp.matmul); linear is x @ w + b.
Array matmul(const Array& a, const Array& b);
Array linear(const Array& x, const Array& weight, const std::optional<Array>& bias = {});

// Shapes.
Array reshape(const Array& a, Shape shape);
Array flatten(const Array& a, int64_t start_dim = 0, int64_t end_dim = -1);
Array transpose(const Array& a, int64_t dim0, int64_t dim1);
Array concatenate(const std::vector<Array>& arrays, int64_t dim);
// x[start:stop:step] along `dim` (Python's bounds: negatives count from the end, ends clamp),
// and x[i] along `dim`, which drops it. A dim split over mesh axes is gathered first.
Array slice(const Array& a, int64_t dim, int64_t start,
            int64_t stop = std::numeric_limits<int64_t>::max(), int64_t step = 1);
Array select(const Array& a, int64_t dim, int64_t index);

// 2-d convolution of x [batch, h, w, in] with kernel [kh, kw, in, out] (Flax's NHWC/HWIO),
// padding "SAME" (JAX's: low side gets the smaller half) or "VALID"; no bias.
Array conv2d(const Array& x, const Array& kernel, std::array<int64_t, 2> strides = {1, 1},
             const std::string& padding = "SAME");

// Layers' math.
// table [V, D], ids int64; ids in [-V, 0) count from the end, as JAX's. An id outside [-V, V)
// is an error without a mesh and a NaN row on one (JAX's take), where ranks need not agree on an
// error.
Array embedding_lookup(const Array& table, const Array& ids);
Array layer_norm(const Array& x, const std::optional<Array>& scale,
                 const std::optional<Array>& bias, double epsilon = 1e-6);
Array rms_norm(const Array& x, const std::optional<Array>& scale, double epsilon = 1e-6);
// Inverted dropout with a mask from the partitionable RNG: the same mask on every mesh.
Array dropout(const Array& x, double rate, const random::Key& key);
// Mean cross entropy of logits [..., C] against integer labels [...].
Array cross_entropy(const Array& logits, const Array& labels);
// optax's softmax_cross_entropy_with_integer_labels: the loss of each example, [...].
Array softmax_cross_entropy_with_integer_labels(const Array& logits, const Array& labels);
// The mean of (a - b)^2 over a and b of one shape (different shapes are an error).
Array mean_squared_error(const Array& a, const Array& b);
// softmax(q k^T / sqrt(d)) v over q, k, v [batch, heads, seq, head_dim]; heads may be sharded.
Array dot_product_attention(const Array& q, const Array& k, const Array& v, bool causal = false);

// jax.lax.with_sharding_constraint: x laid out by spec on its mesh (redistributes).
Array with_sharding_constraint(const Array& x, const PartitionSpec& spec,
                               std::source_location where = std::source_location::current());

// Ops that gathered a sharded dim, on this thread: to Replicate for want of a rule, or to make
// a dim whole that the op needs whole (norms, softmax and max over it, concatenating along it).
// Tests of layouts meant to need no gathering demand zero.
int64_t& fallback_count();

}  // namespace nnx
