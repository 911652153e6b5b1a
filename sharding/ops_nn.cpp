// Layers' math on Arrays: embedding lookup (vocab-parallel: a pending sum over the vocab axes),
// norms over a whole last dim, dropout from the partitionable RNG, losses, attention with
// heads split.
#include <nnx/core/error.h>
#include <nnx/sharding/astype.h>
#include <nnx/sharding/ops.h>
#include <nnx/sharding/detail/ops_common.h>

#include <torch/types.h>

#include <cmath>
#include <initializer_list>
#include <limits>
#include <optional>

namespace nnx {

using namespace detail;

namespace {

// `x` with its last dim whole and no pending sums.
Array whole_last_dim(const Array& x) {
  return x.ndim() == 0 ? resolved(x) : whole_dim(x, x.ndim() - 1);
}

// A per-feature parameter [D] as a whole, replicated tensor next to `like`.
at::Tensor replicated_vector(const std::optional<Array>& v, const Array& like, const char* op,
                             const char* name) {
  if (!v) return {};
  if (v->ndim() != 1 || v->shape()[0] != like.shape().back())
    throw_error(op, fmt::format("{} of shape {} does not fit features of size {}", name,
                                shape_str(*v), like.shape().back()));
  if (!like.mesh()) return v->local();
  return relayout(on_mesh(*v, like.mesh()), {{}}, {}).local();
}

// Negative ids count from the table's end, as NumPy's and JAX's indices do: [-vocab, vocab) is
// in range.
at::Tensor from_end(const at::Tensor& ids, int64_t vocab) {
  return at::where(ids < 0, ids + vocab, ids);
}

// `rows` of a lookup with NaN where its id (after from_end) lies outside [0, vocab) (JAX's
// take); other dtypes as they are.
at::Tensor nan_rows_outside(const at::Tensor& rows, const at::Tensor& ids, int64_t vocab) {
  if (!rows.is_floating_point()) return rows;
  return rows.masked_fill(((ids < 0) | (ids >= vocab)).unsqueeze(-1),
                          std::numeric_limits<double>::quiet_NaN());
}

// The rows of `ids` (from_end already applied), NaN rows for ids outside the table.
at::Tensor rows_or_nan(const at::Tensor& table, const at::Tensor& ids) {
  return nan_rows_outside(torch::embedding(table, ids.clamp(0, table.size(0) - 1)), ids,
                          table.size(0));
}

}  // namespace

Array embedding_lookup(const Array& table0, const Array& given_ids) {
  NNX_CHECK(table0.ndim() == 2, "the table must be [vocab, features], got {}",
            shape_str(table0));
  NNX_CHECK(at::isIntegralType(given_ids.dtype(), /*includeBool=*/false),
            "ids must be integers, got {}", dtype_name(given_ids.dtype()));
  // LibTorch's lookup takes int64 and int32 ids (uint8 labels and int16 ids are common).
  const bool taken = given_ids.dtype() == at::kLong || given_ids.dtype() == at::kInt;
  const Array ids0 = taken ? given_ids : astype(given_ids, at::kLong);
  auto mesh = common_mesh({&table0, &ids0}, "embedding_lookup");
  const int64_t vocab = table0.shape()[0];
  // On a GPU, LibTorch's check of the ids is a device-side assert that ends the process: ids
  // outside the table give NaN rows there, as JAX's take on any device.
  if (!mesh && !ids0.local().is_cpu())
    return Array(rows_or_nan(table0.local(), from_end(ids0.local(), vocab)));
  if (!mesh) {
    try {
      return Array(torch::embedding(table0.local(), from_end(ids0.local(), vocab)));
    } catch (const c10::IndexError& e) {
      NNX_FAIL("an id lies outside [-{}, {}) for a table of {} rows; check the vocabulary size "
               "(LibTorch: {})", vocab, vocab, vocab, e.what_without_backtrace());
    }
  }
  Array table = resolved(on_mesh(table0, mesh)), ids = resolved(on_mesh(ids0, mesh));
  const auto id_dims = dims_of(ids);
  const Axes id_axes = used_axes(id_dims);
  const auto t = dims_of(table);
  const Axes vocab_axes = without(t[0], id_axes);
  const Axes feature_axes = without(without(t[1], id_axes), vocab_axes);
  table = relayout(table, {vocab_axes, feature_axes}, {});
  const at::Tensor local_ids = from_end(ids.local(), vocab);
  at::Tensor out;
  if (vocab_axes.empty() && !local_ids.is_cpu()) {
    out = rows_or_nan(table.local(), local_ids);
  } else if (vocab_axes.empty()) {
    try {
      out = torch::embedding(table.local(), local_ids);
    } catch (const c10::IndexError&) {  // the lookup refused an id: NaN rows, as below
      out = rows_or_nan(table.local(), local_ids);
    }
  } else {
    // This process holds rows [start, start + rows): other ids give zeros, summed later.
    const Box box = table.local_box();
    const int64_t start = box.start[0], rows = box.size[0];
    auto inside = (local_ids >= start) & (local_ids < start + rows);
    auto shifted = (local_ids - start).clamp(0, rows - 1);
    // Filled, not multiplied by `inside`: an inf or NaN in this process's rows stays out of
    // the other ids' sums.
    out = torch::embedding(table.local(), shifted).masked_fill(~inside.unsqueeze(-1), 0);
    // An id outside the table gives a NaN row, as JAX's take does (one device refuses it): the
    // first shard of the vocabulary adds the NaN, so no rank needs to agree on an error.
    if (start == 0) out = nan_rows_outside(out, local_ids, table.shape()[0]);
  }
  Shape shape = ids.shape();
  shape.push_back(table.shape()[1]);
  DimAxes out_dims = id_dims;
  out_dims.push_back(feature_axes);
  return make_result(out, shape, mesh, out_dims, vocab_axes);
}

namespace {
// `t` in float32 where it is a 16-bit float: the norms' statistics lose too much below.
at::Tensor at_least_float32(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf ? t.to(at::kFloat) : t;
}
// The type the defined tensors promote to.
at::ScalarType result_dtype(std::initializer_list<at::Tensor> tensors) {
  std::optional<at::ScalarType> out;
  for (const auto& t : tensors)
    if (t.defined()) out = out ? at::promote_types(*out, t.scalar_type()) : t.scalar_type();
  return *out;
}
}  // namespace

Array layer_norm(const Array& x0, const std::optional<Array>& scale,
                 const std::optional<Array>& bias, double epsilon) {
  NNX_CHECK(x0.ndim() >= 1, "layer_norm normalizes x [..., features]; got a 0-d array");
  Array x = whole_last_dim(x0);
  at::Tensor s = replicated_vector(scale, x, "layer_norm", "scale");
  at::Tensor b = replicated_vector(bias, x, "layer_norm", "bias");
  at::Tensor t = x.local();
  const auto fits = [&](const at::Tensor& p) {
    return !p.defined() || (p.device() == t.device() && p.scalar_type() == t.scalar_type());
  };
  if (t.is_cuda() && fits(s) && fits(b)) {
    // On a GPU, LibTorch's fused kernels (one forward, one backward): the same values within
    // float rounding, the variance taken about the mean rather than as Flax's difference.
    return x.with_local(at::layer_norm(t, {t.size(-1)}, s, b, epsilon));
  }
  // Flax's fast variance: mean(x^2) - mean(x)^2, floored at 0, in float32 at least (as Flax
  // promotes), returned in the type of x, scale and bias together.
  const at::Tensor w = at_least_float32(t);
  at::Tensor mu = w.mean(-1, true);
  at::Tensor var = ((w * w).mean(-1, true) - mu * mu).clamp_min(0);
  at::Tensor y = (w - mu) * (var + epsilon).rsqrt();
  if (s.defined()) y = y * s;
  if (b.defined()) y = y + b;
  return x.with_local(y.to(result_dtype({t, s, b})));
}

Array rms_norm(const Array& x0, const std::optional<Array>& scale, double epsilon) {
  NNX_CHECK(x0.ndim() >= 1, "rms_norm normalizes x [..., features]; got a 0-d array");
  Array x = whole_last_dim(x0);
  at::Tensor s = replicated_vector(scale, x, "rms_norm", "scale");
  at::Tensor t = x.local();
  const at::Tensor w = at_least_float32(t);  // as in layer_norm
  at::Tensor y = w * ((w * w).mean(-1, true) + epsilon).rsqrt();
  if (s.defined()) y = y * s;
  return x.with_local(y.to(result_dtype({t, s})));
}

Array dropout(const Array& x, double rate, const random::Key& key) {
  NNX_CHECK(rate >= 0 && rate <= 1, "rate must lie in [0, 1], got {}", rate);
  if (rate == 0) return x;
  // Zeros, as Flax's zeros_like (x * 0 would be NaN at infinities); no gradient passes.
  if (rate == 1) {
    const at::Tensor t = x.local();
    return x.with_local(at::where(at::zeros_like(t, at::kBool), t, at::zeros({}, t.options())));
  }
  const double keep = 1 - rate;
  const at::Device device = x.local().device();
  at::Tensor mask = random::bernoulli(key, keep, x.shape(), x.local_box(),
                                      device.is_cpu() ? std::nullopt
                                                      : std::optional<at::Device>(device));
  // Times 1 / keep rather than divided by keep, as XLA computes Flax's inputs / keep_prob.
  return x.with_local(x.local() * mask.to(x.local().dtype()) * (1.0 / keep));
}

namespace {

// Logits with a whole class dim and labels laid out as its other dims, on their common mesh.
struct ClassesAndLabels {
  Array logits, labels;
  DimAxes batch_dims;
  std::shared_ptr<const Mesh> mesh;
};

ClassesAndLabels classes_and_labels(const Array& logits0, const Array& labels0, const char* op) {
  if (logits0.ndim() < 1 || labels0.ndim() != logits0.ndim() - 1)
    throw_error(op, fmt::format("logits [..., classes] and labels [...] expected, got {} and {}",
                                shape_str(logits0), shape_str(labels0)));
  for (int64_t d = 0; d < labels0.ndim(); ++d)
    if (labels0.shape()[d] != logits0.shape()[d])
      throw_error(op, fmt::format("labels {} do not match logits {}", shape_str(labels0),
                                  shape_str(logits0)));
  if (!at::isIntegralType(labels0.dtype(), /*includeBool=*/false))
    throw_error(op, fmt::format("labels are class indices, of an integer dtype; got {} (for a "
                                "distribution over the classes use softmax_cross_entropy)",
                                c10::toString(labels0.dtype())));
  ClassesAndLabels out;
  out.mesh = common_mesh({&logits0, &labels0}, op);
  out.logits = whole_last_dim(on_mesh(logits0, out.mesh));
  out.batch_dims = dims_of(out.logits);
  out.batch_dims.pop_back();
  // LibTorch's gather and nll_loss take int64 indices (int32 and uint8 labels are common).
  const Array labels = astype(labels0, at::kLong);
  out.labels = out.mesh ? relayout(resolved(on_mesh(labels, out.mesh)), out.batch_dims, {})
                        : labels;
  return out;
}

// `pick()`, whose LibTorch out-of-bounds error (a label outside [0, classes), on the CPU)
// becomes one that says so.
template <class Pick>
at::Tensor with_labels_checked(int64_t classes, const char* op, Pick pick) {
  try {
    return pick();
  } catch (const c10::Error& e) {  // nll_loss raises an IndexError, gather a plain Error
    const std::string said = e.what_without_backtrace();
    if (said.find("out of bounds") == std::string::npos) throw;
    throw_error(op, fmt::format("a label lies outside [0, {}) for {} classes; labels are class "
                                "indices (LibTorch: {})", classes, classes, said));
  }
}

// On a mesh, labels outside [0, classes) give NaN, as optax's (and as embedding_lookup's ids),
// rather than an error on the one rank that holds them while the others go on; on a GPU too,
// where LibTorch's check is a device-side assert that ends the process. `labels` is clamped into
// range, and the mask says where it was not (undefined where LibTorch's error is kept: a CPU
// tensor off a mesh).
at::Tensor clamp_labels(at::Tensor& labels, int64_t classes, bool on_mesh) {
  if (!on_mesh && labels.is_cpu()) return {};
  at::Tensor outside = (labels < 0) | (labels >= classes);
  labels = labels.clamp(0, classes - 1);
  return outside;
}

}  // namespace

Array cross_entropy(const Array& logits0, const Array& labels0) {
  auto [logits, labels, batch_dims, mesh] =
      classes_and_labels(logits0, labels0, "cross_entropy");
  // log_softmax then one fused negative-log-likelihood sum; no label is ignored (an index
  // outside [0, classes) is an error on the CPU off a mesh, as with a gather, and NaN on a mesh
  // or a GPU).
  const int64_t classes = logits.shape().back();
  at::Tensor lsm = logits.local().log_softmax(-1).reshape({-1, classes});
  at::Tensor ids = labels.local();
  const at::Tensor outside = clamp_labels(ids, classes, mesh != nullptr);
  at::Tensor summed = with_labels_checked(classes, "cross_entropy", [&] {
    return at::nll_loss(lsm, ids.reshape({-1}), {}, at::Reduction::Sum,
                        std::numeric_limits<int64_t>::min());
  });
  if (outside.defined())
    summed = summed.masked_fill(outside.any(), std::numeric_limits<double>::quiet_NaN());
  const double count = static_cast<double>(numel(labels0.shape()));
  at::Tensor local = summed / count;
  if (!mesh) return Array(local);
  return make_result(local, {}, mesh, {}, used_axes(batch_dims));
}

Array softmax_cross_entropy_with_integer_labels(const Array& logits0, const Array& labels0) {
  auto [logits, labels, batch_dims, mesh] =
      classes_and_labels(logits0, labels0, "softmax_cross_entropy_with_integer_labels");
  // A label outside [0, classes) is an error, or NaN on a mesh or a GPU, as in cross_entropy.
  const int64_t classes = logits.shape().back();
  at::Tensor ids = labels.local();
  const at::Tensor outside = clamp_labels(ids, classes, mesh != nullptr);
  const at::Tensor index = ids.unsqueeze(-1);
  at::Tensor local = with_labels_checked(
      classes, "softmax_cross_entropy_with_integer_labels",
      [&] { return -logits.local().log_softmax(-1).gather(-1, index).squeeze(-1); });
  if (outside.defined())
    local = local.masked_fill(outside, std::numeric_limits<double>::quiet_NaN());
  if (!mesh) return Array(local);
  return make_result(local, labels0.shape(), mesh, batch_dims, {});
}

Array mean_squared_error(const Array& a, const Array& b) {
  check_same_shape(a, b, "mean_squared_error");
  return mean(square(sub(a, b)));
}

Array dot_product_attention(const Array& q0, const Array& k0, const Array& v0, bool causal) {
  NNX_CHECK(q0.ndim() == 4 && k0.ndim() == 4 && v0.ndim() == 4,
            "q, k, v are [batch, heads, seq, head_dim]; got {}, {}, {}",
            shape_str(q0), shape_str(k0), shape_str(v0));
  // One batch and one head count for all three (no broadcast), k's and v's sequence alike.
  NNX_CHECK(q0.shape()[3] == k0.shape()[3] && k0.shape()[2] == v0.shape()[2] &&
                q0.shape()[0] == k0.shape()[0] && q0.shape()[1] == k0.shape()[1] &&
                v0.shape()[0] == q0.shape()[0] && v0.shape()[1] == q0.shape()[1],
            "q {}, k {}, v {} do not fit together: q and k share head_dim, k and v share seq, "
            "and all three share batch and heads", shape_str(q0), shape_str(k0), shape_str(v0));
  auto mesh = common_mesh({&q0, &k0, &v0}, "dot_product_attention");
  Array q = resolved(on_mesh(q0, mesh)), k = resolved(on_mesh(k0, mesh)),
        v = resolved(on_mesh(v0, mesh));
  DimAxes dims(4);
  if (mesh) {
    auto qd = dims_of(q);
    dims[0] = qd[0];
    dims[1] = without(qd[1], qd[0]);
    q = relayout(q, dims, {});
    k = relayout(k, dims, {});
    v = relayout(v, dims, {});
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.shape()[3]));
  at::Tensor out;
  if (q.local().is_cuda()) {
    // On a GPU, LibTorch's fused kernels (flash or memory-efficient attention): the same
    // softmax(q k^T * scale) v within float tolerance, without the [seq, seq] scores in memory.
    out = at::scaled_dot_product_attention(q.local(), k.local(), v.local(), {}, 0.0, causal,
                                           scale);
  } else {
    at::Tensor scores = torch::matmul(q.local(), k.local().transpose(-2, -1)) * scale;
    if (causal) {
      auto s_q = scores.size(-2), s_k = scores.size(-1);
      auto mask = torch::ones({s_q, s_k}, scores.options().dtype(torch::kBool)).triu(1);
      scores = scores.masked_fill(mask, -std::numeric_limits<double>::infinity());
    }
    out = torch::matmul(scores.softmax(-1), v.local());
  }
  Shape shape{q.shape()[0], q.shape()[1], q.shape()[2], v.shape()[3]};
  return make_result(out, shape, mesh, dims, {});
}

}  // namespace nnx
