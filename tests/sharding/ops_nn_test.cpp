// The layers' math (embedding lookup, layer and RMS norm, cross entropy and optax's losses,
// attention) on every test mesh and layout against LibTorch autograd, and the ops' errors.
#include "../catch_after_torch.h"

#include "ops_test_util.h"

#include <nnx/sharding/losses.h>

#include <torch/nn/functional/loss.h>

#include <cmath>
#include <limits>

using namespace nnx_test;
using Catch::Matchers::Contains;
using nnx::Array;
using nnx::P;

namespace {

at::Tensor layer_norm_oracle(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& bias,
                             double epsilon) {
  auto centered = x - x.mean(-1, true);
  auto y = centered * torch::rsqrt((centered * centered).mean(-1, true) + epsilon);
  if (scale.defined()) y = y * scale;
  if (bias.defined()) y = y + bias;
  return y;
}

at::Tensor rms_norm_oracle(const at::Tensor& x, const at::Tensor& scale, double epsilon) {
  auto y = x * torch::rsqrt((x * x).mean(-1, true) + epsilon);
  return scale.defined() ? y * scale : y;
}

// Norms over the last dim: with scale and bias laid out by `params`, and without them.
void check_norms(const MeshPtr& mesh, const In& x, const at::Tensor& scale, const at::Tensor& bias,
                 const nnx::PartitionSpec& params, double epsilon = 1e-6) {
  INFO("scale and bias " << params.to_string() << ", epsilon " << epsilon);
  check_op(
      mesh, {x, {scale, params}, {bias, params}},
      [&](const std::vector<Array>& a) { return nnx::layer_norm(a[0], a[1], a[2], epsilon); },
      [&](const std::vector<at::Tensor>& t) {
        return layer_norm_oracle(t[0], t[1], t[2], epsilon);
      },
      {.gathers = sharded_dim(x, -1)});
  check_op(
      mesh, {x, {scale, params}},
      [&](const std::vector<Array>& a) { return nnx::rms_norm(a[0], a[1], epsilon); },
      [&](const std::vector<at::Tensor>& t) { return rms_norm_oracle(t[0], t[1], epsilon); },
      {.gathers = sharded_dim(x, -1)});
}

void check_norms_without_params(const MeshPtr& mesh, const In& x) {
  INFO("no scale, no bias");
  check_unary(
      mesh, x, [](const Array& a) { return nnx::layer_norm(a, std::nullopt, std::nullopt); },
      [](const at::Tensor& t) { return layer_norm_oracle(t, {}, {}, 1e-6); },
      {.gathers = sharded_dim(x, -1)});
  check_unary(
      mesh, x, [](const Array& a) { return nnx::rms_norm(a, std::nullopt); },
      [](const at::Tensor& t) { return rms_norm_oracle(t, {}, 1e-6); },
      {.gathers = sharded_dim(x, -1)});
}

// Cross entropy against logits [..., C] flattened to [N, C], as LibTorch wants the classes.
Checked check_cross_entropy(const MeshPtr& mesh, const In& logits, const In& labels,
                            const Check& check = {}) {
  return check_op(
      mesh, {logits, labels},
      [](const std::vector<Array>& a) { return nnx::cross_entropy(a[0], a[1]); },
      [](const std::vector<at::Tensor>& t) {
        const int64_t classes = t[0].size(-1);
        return torch::nn::functional::cross_entropy(t[0].reshape({-1, classes}),
                                                    t[1].reshape({-1}));
      },
      check);
}

// softmax(q k^T / sqrt(d) + mask) v, the mask -inf above the diagonal when causal.
at::Tensor attention_oracle(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            bool causal) {
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  if (causal) {
    auto above = torch::ones({q.size(-2), k.size(-2)}, torch::kDouble).triu(1).to(torch::kBool);
    scores = scores.masked_fill(above, -std::numeric_limits<double>::infinity());
  }
  return torch::matmul(torch::softmax(scores, -1), v);
}

Checked check_attention(const MeshPtr& mesh, const std::vector<In>& qkv, bool causal,
                        const Check& check = {}) {
  INFO((causal ? "causal" : "not causal"));
  return check_op(
      mesh, qkv,
      [causal](const std::vector<Array>& a) {
        return nnx::dot_product_attention(a[0], a[1], a[2], causal);
      },
      [causal](const std::vector<at::Tensor>& t) {
        return attention_oracle(t[0], t[1], t[2], causal);
      },
      check);
}

Checked check_embedding(const MeshPtr& mesh, const In& table, const In& ids,
                        const Check& check = {}) {
  return check_op(
      mesh, {table, ids},
      [](const std::vector<Array>& a) { return nnx::embedding_lookup(a[0], a[1]); },
      [](const std::vector<at::Tensor>& t) { return torch::embedding(t[0], t[1]); }, check);
}

}  // namespace

TEST_CASE("embedding lookup is exact with a vocab-sharded or an embed-sharded table",
          "[ranks2][ranks4][ranks8]") {
  const auto table = normal_values({16, 8}, 80);
  const auto ids = integer_values({4, 6}, 16, 81);
  for (const auto& mesh : op_meshes()) {
    const auto tables = specs_for({16, 8}, *mesh, {.tuples = true, .max_sharded_dims = 1});
    for (const auto& st : tables)
      for (const auto& si : specs_for({4, 6}, *mesh, {.dims = {0}})) {
        INFO("table " << st.to_string() << ", ids " << si.to_string());
        check_embedding(mesh, {table, st}, {ids, si});
      }
  }
  // Every id of one shard's rows, and ids that repeat (their gradients add up).
  const auto repeated = torch::tensor({0, 15, 15, 7, 8, 0, 3, 3}, torch::kLong).reshape({2, 4});
  for (const auto& mesh : op_meshes())
    for (const auto& st : specs_for({16, 8}, *mesh, {.max_sharded_dims = 1}))
      check_embedding(mesh, {table, st}, {repeated, P()});
}

TEST_CASE("a vocab-sharded table's inf or NaN rows stay out of other ids' embeddings",
          "[ranks2][ranks4][ranks8]") {
  // Row 8 begins a shard and row 7 ends one on 2, 4 and 8 shards: the rows other shards' ids
  // clamp to before they are left out.
  auto table = normal_values({16, 8}, 85);
  table[8][3].fill_(std::numeric_limits<double>::infinity());
  table[7][0].fill_(std::numeric_limits<double>::quiet_NaN());
  auto ids = integer_values({4, 6}, 14, 86);
  ids += (ids >= 7).to(torch::kLong) * 2;  // rows 0 to 6 and 9 to 15
  for (const auto& mesh : op_meshes())
    for (const auto& st : specs_for({16, 8}, *mesh, {.max_sharded_dims = 1})) {
      INFO("table " << st.to_string());
      const Checked got = check_embedding(mesh, {table, st}, {ids, P()});
      CHECK(torch::isfinite(got.whole).all().item<bool>());
    }
}

TEST_CASE("negative ids count from the end and ids outside the table give NaN rows on a mesh, "
          "as JAX's take does", "[ranks2][ranks4][ranks8]") {
  // jnp.take(table, [3, 16, 0, -1, 15, 40, -16, -17], axis=0): rows 3, NaN, 0, 15, 15, NaN, 0,
  // NaN.
  const auto table = normal_values({16, 8}, 87);
  const auto ids = torch::tensor({3, 16, 0, -1, 15, 40, -16, -17}, torch::kLong).reshape({2, 4});
  const auto outside = (ids < -16) | (ids >= 16);
  const auto inside_rows =
      torch::embedding(table, torch::tensor({3, 0, 0, 15, 15, 0, 0, 0}).reshape({2, 4}));
  for (const auto& mesh : op_meshes())
    for (const auto& st : specs_for({16, 8}, *mesh, {.max_sharded_dims = 1})) {
      INFO(mesh->to_string() << " table " << st.to_string());
      const Array got = nnx::embedding_lookup(nnx::device_put(table, {mesh, st}),
                                              nnx::device_put(ids, {mesh, P()}));
      const auto whole = nnx::gather(got);
      CHECK(torch::isnan(whole).all(-1).equal(outside));
      const auto rows = whole.index({~outside});
      CHECK(torch::equal(rows, inside_rows.index({~outside})));
    }
}

TEST_CASE("layer_norm and rms_norm over the last dim are exact, sharded there or not",
          "[ranks2][ranks4][ranks8]") {
  const auto x = normal_values({8, 16}, 82) * 2 + 0.5;
  const auto scale = normal_values({16}, 83), bias = normal_values({16}, 84);
  for (const auto& mesh : op_meshes())
    for (const auto& in : layouts(x, *mesh, {.tuples = true})) {
      for (const auto& params : specs_for({16}, *mesh)) check_norms(mesh, in, scale, bias, params);
      check_norms_without_params(mesh, in);
    }
  // The epsilon is used (a large one changes the values), and batch dims may be several.
  const auto cube = normal_values({4, 8, 16}, 85);
  for (const auto& mesh : op_meshes())
    for (const auto& in : layouts(cube, *mesh, {.max_sharded_dims = 2})) {
      check_norms(mesh, in, scale, bias, replicated(1), 0.5);
      check_norms(mesh, in, scale, bias, P(in.spec[2]));
    }
}

TEST_CASE("cross_entropy is exact with batch-sharded and class-sharded logits",
          "[ranks2][ranks4][ranks8]") {
  for (int64_t classes : {10, 16}) {
    const auto logits = normal_values({8, classes}, 86) * 2;
    const auto labels = integer_values({8}, classes, 87);
    INFO(classes << " classes");
    for (const auto& mesh : op_meshes())
      for (const auto& in : layouts(logits, *mesh, {.tuples = true}))
        for (const auto& sl : specs_for({8}, *mesh, {.tuples = true})) {
          INFO("labels " << sl.to_string());
          auto result =
              check_cross_entropy(mesh, in, {labels, sl}, {.gathers = sharded_dim(in, -1)});
          CHECK(result.out.shape() == nnx::Shape{});
        }
  }
  // Logits [2, 4, 16] against labels [2, 4].
  const auto logits = normal_values({2, 4, 16}, 88), labels = integer_values({2, 4}, 16, 89);
  for (const auto& mesh : op_meshes())
    for (const auto& in : layouts(logits, *mesh))
      check_cross_entropy(mesh, in, {labels, P(in.spec[0], in.spec[1])},
                          {.gathers = sharded_dim(in, -1)});
}

TEST_CASE("softmax_cross_entropy_with_integer_labels gives each example's loss on every layout",
          "[ranks2][ranks4][ranks8]") {
  auto per_example = [](const std::vector<Array>& a) {
    return nnx::softmax_cross_entropy_with_integer_labels(a[0], a[1]);
  };
  auto oracle = [](const std::vector<at::Tensor>& t) {
    const int64_t classes = t[0].size(-1);
    return torch::nn::functional::cross_entropy(
               t[0].reshape({-1, classes}), t[1].reshape({-1}),
               torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone))
        .reshape(t[1].sizes());
  };
  const auto logits = normal_values({8, 10}, 95) * 2;
  const auto labels = integer_values({8}, 10, 96);
  for (const auto& mesh : op_meshes())
    for (const auto& in : layouts(logits, *mesh, {.tuples = true}))
      for (const auto& sl : specs_for({8}, *mesh, {.tuples = true})) {
        INFO("labels " << sl.to_string());
        auto result = check_op(mesh, {in, {labels, sl}}, per_example, oracle,
                               {.gathers = sharded_dim(in, -1)});
        CHECK(result.out.shape() == nnx::Shape{8});
      }
  const auto logits3 = normal_values({2, 4, 16}, 97), labels3 = integer_values({2, 4}, 16, 98);
  for (const auto& mesh : op_meshes())
    for (const auto& in : layouts(logits3, *mesh))
      check_op(mesh, {in, {labels3, P(in.spec[0], in.spec[1])}}, per_example, oracle,
               {.gathers = sharded_dim(in, -1)});
  CHECK_THROWS_WITH(
      nnx::softmax_cross_entropy_with_integer_labels(Array(logits), Array(labels3[0])),
      Catch::Matchers::Contains("[softmax_cross_entropy_with_integer_labels] labels")
          && Catch::Matchers::Contains("do not match logits"));
}

TEST_CASE("optax's elementwise and per-example losses are exact on every layout",
          "[ranks2][ranks4][ranks8]") {
  namespace F = torch::nn::functional;
  const auto p = normal_values({8, 16}, 101) * 2, t = normal_values({8, 16}, 102) * 2;
  const auto labels01 = positive_values({8, 16}, 103) - 0.5;  // in [0, 1)
  const auto distribution = torch::softmax(normal_values({8, 16}, 104), -1);
  struct Loss {
    const char* name;
    at::Tensor second;
    std::function<Array(const Array&, const Array&)> op;
    std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> oracle;
  };
  const std::vector<Loss> losses{
      {"squared_error", t, [](auto& a, auto& b) { return nnx::squared_error(a, b); },
       [](auto& a, auto& b) { return (a - b).square(); }},
      {"huber_loss", t, [](auto& a, auto& b) { return nnx::huber_loss(a, b, 1.5); },
       [](auto& a, auto& b) {
         return F::huber_loss(a, b, F::HuberLossFuncOptions().reduction(torch::kNone).delta(1.5));
       }},
      {"sigmoid_binary_cross_entropy", labels01,
       [](auto& a, auto& b) { return nnx::sigmoid_binary_cross_entropy(a, b); },
       [](auto& a, auto& b) {
         return F::binary_cross_entropy_with_logits(
             a, b, F::BinaryCrossEntropyWithLogitsFuncOptions().reduction(torch::kNone));
       }},
      {"softmax_cross_entropy", distribution,
       [](auto& a, auto& b) { return nnx::softmax_cross_entropy(a, b); },
       [](auto& a, auto& b) {
         return F::cross_entropy(a, b, F::CrossEntropyFuncOptions().reduction(torch::kNone));
       }},
  };
  for (const auto& loss : losses) {
    INFO(loss.name);
    check_binary(MeshPtr{}, {p}, {loss.second}, loss.op, loss.oracle);  // without a mesh
    for (const auto& mesh : op_meshes())
      for (const auto& [sa, sb] : spec_pairs({8, 16}, {8, 16}, *mesh)) {
        const bool per_example = std::string(loss.name) == "softmax_cross_entropy";
        check_binary(mesh, {p, sa}, {loss.second, sb}, loss.op, loss.oracle,
                     {.promised = !per_example});
      }
  }
  CHECK_THROWS_WITH(nnx::softmax_cross_entropy(Array(p), Array(t[0])),
                    Contains("for integer labels use softmax_cross_entropy_with_integer_labels"));
  CHECK_THROWS_WITH(nnx::huber_loss(Array(p), Array(t), 0), Contains("delta must be positive"));
}

TEST_CASE("losses take labels and inputs of other dtypes as optax does, and refuse the rest") {
  const auto logits = torch::tensor({{2.0, -1.0, 0.5}, {0.0, 3.0, -2.0}});
  // Integer labels of any integer dtype; float or bool labels name the other loss.
  const auto want = nnx::softmax_cross_entropy_with_integer_labels(
                        Array(logits), Array(torch::tensor({2, 1}, torch::kLong)))
                        .local();
  for (auto dtype : {torch::kInt, torch::kShort, torch::kByte}) {
    INFO(c10::toString(dtype));
    const Array labels(torch::tensor({2, 1}, dtype));
    CHECK(torch::equal(
        nnx::softmax_cross_entropy_with_integer_labels(Array(logits), labels).local(), want));
    CHECK(torch::allclose(nnx::cross_entropy(Array(logits), labels).local(), want.mean()));
  }
  for (auto dtype : {torch::kFloat, torch::kBool})
    CHECK_THROWS_WITH(nnx::cross_entropy(Array(logits), Array(torch::tensor({1, 0}, dtype))),
                      Contains("[cross_entropy] labels are class indices, of an integer dtype") &&
                          Contains("use softmax_cross_entropy"));

  // Bool labels, and labels in another float dtype, are taken in the logits' dtype.
  const auto x = torch::tensor({-30.0f, -1.0f, 0.0f, 2.0f, 30.0f});
  const auto y = torch::tensor({true, false, true, true, false});
  const auto bce = nnx::sigmoid_binary_cross_entropy(Array(x), Array(y)).local();
  CHECK(bce.dtype() == torch::kFloat);
  CHECK(torch::allclose(bce, torch::nn::functional::binary_cross_entropy_with_logits(
                                 x, y.to(torch::kFloat),
                                 torch::nn::functional::BinaryCrossEntropyWithLogitsFuncOptions()
                                     .reduction(torch::kNone))));
  const auto low = nnx::sigmoid_binary_cross_entropy(Array(x.to(torch::kBFloat16)),
                                                     Array(y.to(torch::kDouble)));
  CHECK(low.dtype() == torch::kBFloat16);

  // optax's squared_error and l2_loss refuse to broadcast; [N, 1] against [N] is a mistake.
  const Array column(torch::ones({4, 1})), row(torch::ones({4}));
  CHECK_THROWS_WITH(nnx::squared_error(column, row),
                    Contains("[squared_error] predictions (4, 1) and targets (4,) differ"));
  CHECK_THROWS_WITH(nnx::l2_loss(column, row), Contains("[l2_loss] predictions (4, 1)"));
  CHECK_THROWS_WITH(nnx::mean_squared_error(column, row),
                    Contains("[mean_squared_error] predictions (4, 1) and targets (4,) differ"));
}

TEST_CASE("mean_squared_error is exact on every pair of layouts", "[ranks2][ranks4][ranks8]") {
  const auto a = normal_values({8, 16}, 90), b = normal_values({8, 16}, 91);
  auto mse = [](const Array& x, const Array& y) { return nnx::mean_squared_error(x, y); };
  auto oracle = [](const at::Tensor& x, const at::Tensor& y) { return torch::mse_loss(x, y); };
  for (const auto& mesh : op_meshes()) {
    for (const auto& [sa, sb] : spec_pairs({8, 16}, {8, 16}, *mesh))
      check_binary(mesh, {a, sa}, {b, sb}, mse, oracle);
    for (const auto& pa : pending_sum_layouts(a, *mesh))
      for (const auto& pb : layouts(b, *mesh)) check_binary(mesh, pa, pb, mse, oracle);
  }
}

TEST_CASE("dot_product_attention is exact with heads sharded, causal or not",
          "[ranks2][ranks4][ranks8]") {
  const auto q = normal_values({2, 4, 6, 8}, 92), k = normal_values({2, 4, 6, 8}, 93);
  const auto v = normal_values({2, 4, 6, 8}, 94);
  for (const auto& mesh : op_meshes())
    for (const auto& s : specs_for({2, 4, 6, 8}, *mesh, {.tuples = true, .dims = {0, 1}}))
      for (bool causal : {false, true}) {
        check_attention(mesh, {{q, s}, {k, s}, {v, s}}, causal);
        // Replicated keys and values next to sharded queries.
        check_attention(mesh, {{q, s}, {k, P()}, {v, P()}}, causal);
      }
}

TEST_CASE("nn ops on layouts without a rule still give exact values and gradients",
          "[ranks2][ranks4][ranks8]") {
  // Fallbacks are allowed here; the values and gradients are not negotiable.
  const Check any{.promised = false};
  const auto q = normal_values({2, 4, 6, 8}, 95), k = normal_values({2, 4, 6, 8}, 96);
  const auto v = normal_values({2, 4, 6, 8}, 97);
  const auto table = normal_values({16, 8}, 98);
  const auto ids = integer_values({4, 6}, 16, 99);
  for (const auto& mesh : op_meshes()) {
    // Sequence-sharded attention.
    for (const auto& s : specs_for({2, 4, 6, 8}, *mesh, {.dims = {2}}))
      for (bool causal : {false, true})
        check_attention(mesh, {{q, s}, {k, s}, {v, s}}, causal, any);
    // Ids sharded along the sequence, and a table sharded on both dims.
    for (const auto& si : specs_for({4, 6}, *mesh, {.dims = {1}}))
      for (const auto& st : specs_for({16, 8}, *mesh, {.tuples = true}))
        check_embedding(mesh, {table, st}, {ids, si}, any);
  }
}

TEST_CASE("ops reject mismatched shapes and meshes on every rank alike, naming them",
          "[ranks2][ranks4][ranks8]") {
  const auto& mesh = op_meshes().front();
  const auto& other_mesh = op_meshes().back();
  const auto full = normal_values({8, 16}, 100);
  const auto a = nnx::device_put(full, {mesh, P("x")});
  const auto bad_inner = nnx::device_put(normal_values({12, 4}, 101), {mesh, P()});
  const auto bad_width = nnx::device_put(normal_values({8, 15}, 102), {mesh, P("x")});
  CHECK_THROWS_AS(nnx::matmul(a, bad_inner), nnx::Error);
  CHECK_THROWS_WITH(nnx::matmul(a, bad_inner), Contains("8, 16") && Contains("12, 4"));
  CHECK_THROWS_AS(nnx::add(a, bad_width), nnx::Error);
  CHECK_THROWS_WITH(nnx::add(a, bad_width), Contains("8, 16") && Contains("8, 15"));
  const auto elsewhere = nnx::device_put(full, {other_mesh, P()});
  const auto elsewhere_b = nnx::device_put(normal_values({16, 12}, 103), {other_mesh, P()});
  INFO(mesh->to_string() << " and " << other_mesh->to_string());
  CHECK_THROWS_AS(nnx::add(a, elsewhere), nnx::Error);
  CHECK_THROWS_WITH(nnx::add(a, elsewhere),
                    Contains(mesh->to_string()) && Contains(other_mesh->to_string()));
  CHECK_THROWS_WITH(nnx::matmul(a, elsewhere_b),
                    Contains(mesh->to_string()) && Contains(other_mesh->to_string()));
  // v with other heads than q and k: a head split used to broadcast it silently.
  const auto q = nnx::device_put(normal_values({2, 8, 4, 16}, 105), {mesh, P(nnx::none, "x")});
  const auto v = nnx::device_put(normal_values({2, 16, 4, 16}, 106), {mesh, P(nnx::none, "x")});
  CHECK_THROWS_WITH(nnx::dot_product_attention(q, q, v),
                    Contains("(2, 8, 4, 16)") && Contains("(2, 16, 4, 16)") &&
                        Contains("all three share batch and heads"));
  // No rank was left inside a collective: they are still in step.
  CHECK(torch::equal(nnx::gather(a).cpu(), full));
  CHECK(torch::equal(nnx::gather(nnx::add(a, a)).cpu(), full * 2));
}

TEST_CASE("ops reject mismatched shapes without a mesh, naming them") {
  const Array a(normal_values({8, 16}, 104));
  CHECK_THROWS_WITH(nnx::matmul(a, Array(torch::zeros({12, 4}, torch::kDouble))),
                    Contains("8, 16") && Contains("12, 4"));
  CHECK_THROWS_WITH(nnx::add(a, Array(torch::zeros({8, 15}, torch::kDouble))),
                    Contains("8, 16") && Contains("8, 15"));
  CHECK_THROWS_WITH(nnx::mul(a, Array(torch::zeros({16, 8}, torch::kDouble))),
                    Contains("8, 16") && Contains("16, 8"));
  CHECK_THROWS_WITH(nnx::reshape(a, {5, 5}), Contains("8, 16") && Contains("5, 5"));
  CHECK_THROWS_WITH(nnx::embedding_lookup(Array(normal_values({16, 8}, 109)),
                                           Array(torch::tensor({3, 16}, torch::kLong))),
                    Contains("an id lies outside [-16, 16) for a table of 16 rows"));
  // -16 is the first row, as in JAX.
  CHECK(torch::equal(nnx::embedding_lookup(Array(normal_values({16, 8}, 109)),
                                           Array(torch::tensor({-16, -1}, torch::kLong)))
                         .local(),
                     normal_values({16, 8}, 109).index({torch::tensor({0, 15})})));
  const Array q(normal_values({2, 4, 8, 16}, 107)), v(normal_values({2, 2, 8, 16}, 108));
  CHECK_THROWS_WITH(nnx::dot_product_attention(q, q, v),
                    Contains("(2, 4, 8, 16)") && Contains("(2, 2, 8, 16)"));
}

TEST_CASE("reshape of an array without elements on a mesh gives the asked shape",
          "[ranks2][ranks4][ranks8]") {
  const auto& mesh = op_meshes().front();  // axis "x" over every rank
  for (const auto& in : std::vector<In>{{torch::zeros({0}), P()},
                                        {torch::zeros({0, 8}), P(nnx::none, "x")},
                                        {torch::zeros({8, 0}), P("x")}}) {
    INFO(in.spec.to_string());
    const Array a = nnx::device_put(in.full, {mesh, in.spec});
    for (const nnx::Shape& shape : {nnx::Shape{0, 5}, nnx::Shape{5, 0, 2}, nnx::Shape{0}}) {
      const Array r = nnx::reshape(a, shape);
      CHECK(r.shape() == shape);
      CHECK(nnx::gather(r).sizes().vec() == shape);
    }
  }
}

TEST_CASE("embedding, norms, losses and attention without a mesh equal LibTorch") {
  const MeshPtr none;
  check_embedding(none, {normal_values({16, 8}, 110)}, {integer_values({4, 6}, 16, 111)});
  const auto x = normal_values({8, 16}, 112);
  check_norms(none, {x}, normal_values({16}, 113), normal_values({16}, 114), P());
  check_norms(none, {x}, normal_values({16}, 113), normal_values({16}, 114), P(), 0.5);
  check_norms_without_params(none, {x});
  check_cross_entropy(none, {normal_values({8, 10}, 115)}, {integer_values({8}, 10, 116)});
  check_binary(
      none, {x}, {normal_values({8, 16}, 117)},
      [](const Array& p, const Array& t) { return nnx::mean_squared_error(p, t); },
      [](const at::Tensor& p, const at::Tensor& t) { return torch::mse_loss(p, t); });
  const auto q = normal_values({2, 4, 6, 8}, 118), k = normal_values({2, 4, 6, 8}, 119);
  const auto v = normal_values({2, 4, 6, 8}, 120);
  for (bool causal : {false, true}) check_attention(none, {{q}, {k}, {v}}, causal);
}

TEST_CASE("gathers that make a sharded dim whole count as fallbacks", "[ranks2]") {
  auto mesh = nnx::make_mesh({2}, {"x"});
  const auto t = normal_values({4, 8}, 91);
  auto count = [](auto op) {
    nnx::fallback_count() = 0;
    (void)op();
    return nnx::fallback_count();
  };
  auto along_features = nnx::device_put(t, {mesh, P(nnx::none, "x")});
  CHECK(count([&] { return nnx::layer_norm(along_features, std::nullopt, std::nullopt); }) == 1);
  CHECK(count([&] { return nnx::rms_norm(along_features, std::nullopt); }) == 1);
  CHECK(count([&] { return nnx::softmax(along_features, 1); }) == 1);
  CHECK(count([&] { return nnx::max(along_features, 1); }) == 1);
  CHECK(count([&] { return nnx::concatenate({along_features, along_features}, 1); }) == 1);
  // The same ops over a dim that is whole already gather nothing.
  auto along_rows = nnx::device_put(t, {mesh, P("x")});
  CHECK(count([&] { return nnx::layer_norm(along_rows, std::nullopt, std::nullopt); }) == 0);
  CHECK(count([&] { return nnx::softmax(along_rows, 1); }) == 0);
  CHECK(count([&] { return nnx::max(along_rows, 1); }) == 0);
  CHECK(count([&] { return nnx::concatenate({along_rows, along_rows}, 1); }) == 0);
}
