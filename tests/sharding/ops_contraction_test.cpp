// Contractions and shape ops: matmul (2-d and batched), linear (column then row parallel),
// reshape, flatten, transpose and concatenate on every test mesh and layout, against LibTorch
// autograd on the whole tensors, with no fallback.
#include "../catch_after_torch.h"

#include "ops_test_util.h"

using namespace nnx_test;
using nnx::Array;
using nnx::P;

namespace {

Checked check_matmul(const MeshPtr& mesh, const In& a, const In& b, const Check& check = {}) {
  return check_binary(
      mesh, a, b, [](const Array& x, const Array& y) { return nnx::matmul(x, y); },
      [](const at::Tensor& x, const at::Tensor& y) { return torch::matmul(x, y); }, check);
}

// A unary op that records the redistribute steps it ran.
std::function<Array(const Array&)> counted(nnx::RedistributeCounts& counts,
                                           std::function<Array(const Array&)> op) {
  return [&counts, op](const Array& a) {
    nnx::redistribute_counts() = {};
    auto y = op(a);
    counts = nnx::redistribute_counts();
    return y;
  };
}

nnx::PartitionSpec swapped(const nnx::PartitionSpec& spec, size_t d0, size_t d1) {
  auto entries = spec.entries();
  std::swap(entries[d0], entries[d1]);
  return nnx::PartitionSpec(entries);
}

// The layers of a two-layer MLP and how each lies.
struct MlpLayout {
  const char* name;
  nnx::PartitionSpec x, w1, b1, w2, b2;
  std::string hidden_axis;  // the axis sharding the hidden dim of the first layer's output
};

}  // namespace

TEST_CASE("matmul of [8, 16] by [16, 12] is exact on every pair of layouts of a 1-d mesh",
          "[ranks2][ranks4][ranks8]") {
  const auto& mesh = op_meshes().front();
  const auto a = normal_values({8, 16}, 30), b = normal_values({16, 12}, 31);
  for (const auto& la : layouts(a, *mesh))
    for (const auto& lb : layouts(b, *mesh)) check_matmul(mesh, la, lb);
}

TEST_CASE("matmul follows its rule table without communication", "[ranks2][ranks4][ranks8]") {
  // S(0)·R -> S(0); R·S(1) -> S(1); S(1)·S(0) -> pending sum; R·R -> R; one side split on the
  // contraction dim: the other side is sliced locally, leaving a pending sum.
  const auto& mesh = op_meshes().front();  // {n} named "x"
  const auto a = normal_values({8, 16}, 32), b = normal_values({16, 24}, 33);
  struct Rule {
    nnx::PartitionSpec a, b, out;
    std::vector<std::string> partial;
  };
  const std::vector<Rule> rules{
      {P("x", nnx::none), P(), P("x", nnx::none), {}},
      {P(), P(nnx::none, "x"), P(nnx::none, "x"), {}},
      {P(nnx::none, "x"), P("x", nnx::none), P(nnx::none, nnx::none), {"x"}},
      {P(), P(), P(nnx::none, nnx::none), {}},
      {P(nnx::none, "x"), P(), P(nnx::none, nnx::none), {"x"}},
      {P(), P("x", nnx::none), P(nnx::none, nnx::none), {"x"}},
  };
  for (const auto& rule : rules) {
    INFO(rule.a.to_string() << " @ " << rule.b.to_string());
    nnx::RedistributeCounts counts;
    auto result = check_binary(
        mesh, {a, rule.a}, {b, rule.b},
        [&](const Array& x, const Array& y) {
          nnx::redistribute_counts() = {};
          auto out = nnx::matmul(x, y);
          counts = nnx::redistribute_counts();
          return out;
        },
        [](const at::Tensor& x, const at::Tensor& y) { return torch::matmul(x, y); });
    CHECK(counts.collectives() == 0);
    CHECK(result.out.spec() == rule.out);
    CHECK(result.out.partial_axes() == rule.partial);
  }
}

TEST_CASE("matmul of [8, 16] by [16, 12] is exact on every pair of layouts of 2-d meshes",
          "[ranks2][ranks4][ranks8]") {
  const auto a = normal_values({8, 16}, 34), b = normal_values({16, 12}, 35);
  const auto& meshes = op_meshes();
  for (size_t m = 1; m < meshes.size(); ++m) {
    const auto& mesh = meshes[m];
    for (const auto& [sa, sb] : spec_pairs({8, 16}, {16, 12}, *mesh))
      check_matmul(mesh, {a, sa}, {b, sb});
    for (const auto& pa : pending_sum_layouts(a, *mesh))
      for (const auto& sb : specs_for({16, 12}, *mesh)) check_matmul(mesh, pa, {b, sb});
  }
}

TEST_CASE("batched matmul of [4, 8, 16] by [16, 12] and by [4, 16, 12] is exact on any layouts",
          "[ranks2][ranks4][ranks8]") {
  const auto a = normal_values({4, 8, 16}, 36);
  const auto shared = normal_values({16, 12}, 37), batched = normal_values({4, 16, 12}, 38);
  for (const auto& mesh : op_meshes()) {
    const auto a_specs = specs_for({4, 8, 16}, *mesh);
    for (const auto& sa : a_specs)
      for (const auto& sb : specs_for({16, 12}, *mesh)) check_matmul(mesh, {a, sa}, {shared, sb});
    for (const auto& sa : a_specs)
      for (const auto& sb : specs_for({4, 16, 12}, *mesh, {.max_sharded_dims = 1}))
        check_matmul(mesh, {a, sa}, {batched, sb});
    // The same batch layout on both sides, two-axis entries included.
    for (const auto& s : specs_for({4, 8, 16}, *mesh, {.tuples = true, .dims = {0}}))
      check_matmul(mesh, {a, s}, {batched, s});
  }
}

TEST_CASE("linear with bias, column parallel then row parallel, is exact with no fallback",
          "[ranks2][ranks4][ranks8]") {
  const auto x = normal_values({8, 16}, 40), x3 = normal_values({8, 2, 16}, 45);
  const auto w1 = normal_values({16, 32}, 41) * 0.25, b1 = normal_values({32}, 42);
  const auto w2 = normal_values({32, 16}, 43) * 0.25, b2 = normal_values({16}, 44);
  const auto none = nnx::none;
  const nnx::SpecEntry ab{"a", "b"};
  for (const auto& mesh : op_meshes()) {
    std::vector<MlpLayout> cases;
    if (mesh->ndim() == 1) {
      cases = {
          {"replicated", P(), P(), P(), P(), P(), ""},
          {"data parallel", P("x"), P(), P(), P(), P(), ""},
          {"tensor parallel", P(), P(none, "x"), P("x"), P("x", none), P(), "x"},
          {"fully sharded weights", P("x"), P("x", none), P(), P("x", none), P(), ""},
      };
    } else {
      cases = {
          {"data a, tensor b", P("a", none), P(none, "b"), P("b"), P("b", none), P(), "b"},
          {"data b, tensor a", P("b", none), P(none, "a"), P("a"), P("a", none), P(), "a"},
          {"tensor over both axes", P(), P(none, ab), P(ab), P(ab, none), P(), ""},
          {"data over both axes", P(ab, none), P(), P(), P(), P(), ""},
      };
    }
    for (const auto& c : cases) {
      INFO(c.name);
      nnx::PartitionSpec hidden_spec;
      std::vector<std::string> hidden_partial{"unset"};
      check_op(
          mesh, {{x, c.x}, {w1, c.w1}, {b1, c.b1}, {w2, c.w2}, {b2, c.b2}},
          [&](const std::vector<Array>& in) {
            auto h = nnx::linear(in[0], in[1], in[2]);
            hidden_spec = h.spec();
            hidden_partial = h.partial_axes();
            return nnx::linear(nnx::gelu(h), in[3], in[4]);
          },
          [](const std::vector<at::Tensor>& t) {
            auto h = torch::gelu(torch::matmul(t[0], t[1]) + t[2], "tanh");
            return torch::matmul(h, t[3]) + t[4];
          });
      if (!c.hidden_axis.empty()) {
        // Column parallel: the hidden activations stay split by the weight's columns.
        CHECK(hidden_spec.size() == 2);
        if (hidden_spec.size() == 2) CHECK(hidden_spec[1] == nnx::SpecEntry(c.hidden_axis));
        CHECK(hidden_partial.empty());
      }
      INFO("without bias");
      check_op(
          mesh, {{x, c.x}, {w1, c.w1}},
          [](const std::vector<Array>& in) { return nnx::linear(in[0], in[1]); },
          [](const std::vector<at::Tensor>& t) { return torch::matmul(t[0], t[1]); });
      INFO("3-d input [8, 2, 16], the bias added in the GEMM where the blocks fit");
      check_op(
          mesh, {{x3, c.x}, {w1, c.w1}, {b1, c.b1}},
          [](const std::vector<Array>& in) { return nnx::linear(in[0], in[1], in[2]); },
          [](const std::vector<at::Tensor>& t) { return torch::matmul(t[0], t[1]) + t[2]; });
    }
  }
}

TEST_CASE("reshape keeps a sharded leading dim: [8, 4, 6] -> [32, 6] and [8, 24] -> [8, 4, 6]",
          "[ranks2][ranks4][ranks8]") {
  const auto cube = normal_values({8, 4, 6}, 50), matrix = normal_values({8, 24}, 51);
  struct Case {
    const at::Tensor& x;
    nnx::Shape to;
  };
  for (const auto& c : {Case{cube, {32, 6}}, Case{matrix, {8, 4, 6}}})
    for (const auto& mesh : op_meshes())
      for (const auto& in : layouts(c.x, *mesh, {.tuples = true, .dims = {0}})) {
        INFO("reshape to " << nnx::to_string(c.to));
        nnx::RedistributeCounts counts;
        auto result = check_unary(
            mesh, in, counted(counts, [&](const Array& a) { return nnx::reshape(a, c.to); }),
            [&](const at::Tensor& t) { return t.reshape(c.to); });
        CHECK(counts.collectives() == 0);
        if (result.out.defined()) {
          CHECK(result.out.spec()[0] == in.spec[0]);
          CHECK(result.out.partial_axes() == in.partial);
        }
      }
}

TEST_CASE("reshape keeps a sharded dim when size-1 dims come before it: [8] -> [1, 8] and back",
          "[ranks2][ranks4][ranks8]") {
  const auto vector = normal_values({8}, 63), row = normal_values({1, 8}, 64);
  const auto matrix = normal_values({8, 24}, 65), slab = normal_values({8, 1, 24}, 66);
  struct Case {
    const at::Tensor& x;
    nnx::Shape to;
    int64_t from_dim, to_dim;  // the split dim, before and after
  };
  for (const auto& c : {Case{vector, {1, 8}, 0, 1}, Case{row, {8}, 1, 0},
                        Case{vector, {1, 1, 8}, 0, 2}, Case{matrix, {8, 1, 24}, 1, 2},
                        Case{slab, {8, 24}, 2, 1}, Case{slab, {1, 8, 24}, 0, 1},
                        Case{row, {8}, 0, 0}})  // a size-1 dim split over a size-1 mesh axis
    for (const auto& mesh : op_meshes())
      for (const auto& in : layouts(c.x, *mesh, {.tuples = true, .dims = {c.from_dim}})) {
        INFO("reshape " << c.x.sizes() << " to " << nnx::to_string(c.to));
        nnx::RedistributeCounts counts;
        auto result = check_unary(
            mesh, in, counted(counts, [&](const Array& a) { return nnx::reshape(a, c.to); }),
            [&](const at::Tensor& t) { return t.reshape(c.to); });
        CHECK(counts.collectives() == 0);
        if (result.out.defined()) CHECK(result.out.spec()[c.to_dim] == in.spec[c.from_dim]);
      }
}

TEST_CASE("flatten merges dims around a sharded leading dim", "[ranks2][ranks4][ranks8]") {
  const auto x = normal_values({8, 4, 6}, 52);
  struct Case {
    int64_t start, end;
  };
  for (const auto& mesh : op_meshes())
    for (const auto& in : layouts(x, *mesh, {.tuples = true, .dims = {0}}))
      for (const auto& c : {Case{1, -1}, Case{0, 1}, Case{0, -1}, Case{1, 2}}) {
        INFO("flatten(" << c.start << ", " << c.end << ")");
        nnx::RedistributeCounts counts;
        check_unary(
            mesh, in,
            counted(counts, [&](const Array& a) { return nnx::flatten(a, c.start, c.end); }),
            [&](const at::Tensor& t) { return t.flatten(c.start, c.end); });
        CHECK(counts.collectives() == 0);
      }
  // The default flattens everything.
  for (const auto& mesh : op_meshes())
    check_unary(
        mesh, {x, P(mesh->axis_names()[0])}, [](const Array& a) { return nnx::flatten(a); },
        [](const at::Tensor& t) { return t.flatten(); });
}

TEST_CASE("transpose moves the sharding with the dims, without communication",
          "[ranks2][ranks4][ranks8]") {
  const auto matrix = normal_values({8, 16}, 53), cube = normal_values({4, 8, 16}, 54);
  struct Case {
    const at::Tensor& x;
    int64_t d0, d1;
    bool tuples;
  };
  for (const auto& c : {Case{matrix, 0, 1, true}, Case{matrix, -1, -2, false},
                        Case{cube, 1, 2, false}, Case{cube, 0, 2, false}})
    for (const auto& mesh : op_meshes())
      for (const auto& in : layouts(c.x, *mesh, {.tuples = c.tuples})) {
        INFO("transpose(" << c.d0 << ", " << c.d1 << ")");
        nnx::RedistributeCounts counts;
        auto result = check_unary(
            mesh, in,
            counted(counts, [&](const Array& a) { return nnx::transpose(a, c.d0, c.d1); }),
            [&](const at::Tensor& t) { return t.transpose(c.d0, c.d1); });
        CHECK(counts.collectives() == 0);
        const auto n = static_cast<int64_t>(in.spec.size());
        if (result.out.defined())
          CHECK(result.out.spec() == swapped(in.spec, (c.d0 + n) % n, (c.d1 + n) % n));
      }
}

TEST_CASE("concatenate along an unsharded dim is exact and keeps the layout",
          "[ranks2][ranks4][ranks8]") {
  const auto a = normal_values({8, 16}, 55), b = normal_values({8, 8}, 56);
  const auto c = normal_values({8, 24}, 57), d = normal_values({4, 16}, 58);
  auto concat = [](int64_t dim) {
    return std::pair{
        NnxFn([dim](const std::vector<Array>& x) { return nnx::concatenate(x, dim); }),
        TorchFn([dim](const std::vector<at::Tensor>& t) { return torch::cat(t, dim); })};
  };
  for (const auto& mesh : op_meshes()) {
    const auto [on1, cat1] = concat(1);
    const auto [on_last, cat_last] = concat(-1);
    const auto [on0, cat0] = concat(0);
    for (const auto& sa : specs_for({8, 16}, *mesh, {.tuples = true, .dims = {0}}))
      for (const auto& sb : specs_for({8, 8}, *mesh, {.dims = {0}})) {
        check_op(mesh, {{a, sa}, {b, sb}}, on1, cat1);
        check_op(mesh, {{a, sa}, {b, sb}, {c, sb}}, on_last, cat_last);
      }
    for (const auto& s : specs_for({8, 16}, *mesh, {.dims = {1}})) {
      auto result = check_op(mesh, {{a, s}, {d, s}}, on0, cat0);
      if (result.out.defined()) CHECK(result.out.spec()[1] == s[1]);
    }
    for (const auto& pa : pending_sum_layouts(a, *mesh, {.dims = {0}}))
      check_op(mesh, {pa, {b, pa.spec}}, on1, cat1);
  }
}

TEST_CASE("shape ops on layouts without a rule still give exact values and gradients",
          "[ranks2][ranks4][ranks8]") {
  // Fallbacks are allowed here; the values and gradients are not negotiable.
  const Check any{.promised = false};
  const auto matrix = normal_values({8, 24}, 60), cube = normal_values({8, 4, 6}, 61);
  const auto other = normal_values({8, 24}, 62);
  for (const auto& mesh : op_meshes()) {
    for (const auto& in : layouts(matrix, *mesh, {.dims = {1}}))
      check_unary(
          mesh, in, [](const Array& a) { return nnx::reshape(a, {8, 4, 6}); },
          [](const at::Tensor& t) { return t.reshape({8, 4, 6}); }, any);
    for (const auto& in : layouts(cube, *mesh, {.dims = {1, 2}}))
      check_unary(
          mesh, in, [](const Array& a) { return nnx::reshape(a, {32, 6}); },
          [](const at::Tensor& t) { return t.reshape({32, 6}); }, any);
    for (const auto& s : specs_for({8, 24}, *mesh, {.dims = {0}}))
      check_op(
          mesh, {{matrix, s}, {other, s}},
          [](const std::vector<Array>& x) { return nnx::concatenate(x, 0); },
          [](const std::vector<at::Tensor>& t) { return torch::cat(t, 0); }, any);
  }
}

TEST_CASE("matmul, linear and shape ops without a mesh equal LibTorch") {
  const MeshPtr none;
  const auto a = normal_values({8, 16}, 70), b = normal_values({16, 12}, 71);
  check_matmul(none, {a}, {b});
  check_matmul(none, {normal_values({4, 8, 16}, 72)}, {b});
  check_matmul(none, {normal_values({4, 8, 16}, 72)}, {normal_values({4, 16, 12}, 73)});
  const auto bias = normal_values({12}, 74);
  check_op(
      none, {{a}, {b}, {bias}},
      [](const std::vector<Array>& x) { return nnx::linear(x[0], x[1], x[2]); },
      [](const std::vector<at::Tensor>& t) { return torch::matmul(t[0], t[1]) + t[2]; });
  const auto cube = normal_values({8, 4, 6}, 75);
  check_unary(
      none, {cube}, [](const Array& x) { return nnx::reshape(x, {32, 6}); },
      [](const at::Tensor& t) { return t.reshape({32, 6}); });
  check_unary(
      none, {cube}, [](const Array& x) { return nnx::flatten(x, 1); },
      [](const at::Tensor& t) { return t.flatten(1); });
  check_unary(
      none, {cube}, [](const Array& x) { return nnx::transpose(x, 0, 2); },
      [](const at::Tensor& t) { return t.transpose(0, 2); });
  check_op(
      none, {{a}, {normal_values({8, 4}, 76)}},
      [](const std::vector<Array>& x) { return nnx::concatenate(x, 1); },
      [](const std::vector<at::Tensor>& t) { return torch::cat(t, 1); });
}

TEST_CASE("matmul and linear by a narrow right operand (2 to 11 columns, run column-major) equal "
          "LibTorch in values and gradients",
          "[ranks2][ranks4][ranks8]") {
  const auto x = normal_values({48, 16}, 80), x3 = normal_values({24, 4, 16}, 81);
  for (const int64_t columns : {2, 10, 11, 12}) {
    INFO(columns << " columns");
    const auto w = normal_values({16, columns}, 82), bias = normal_values({columns}, 83);
    std::vector<MeshPtr> meshes = op_meshes();
    meshes.insert(meshes.begin(), MeshPtr{});
    for (const auto& mesh : meshes) {
      INFO((mesh ? mesh->to_string() : std::string("no mesh")));
      const nnx::PartitionSpec rows = mesh ? (mesh->ndim() == 1 ? P("x") : P("a")) : P();
      for (const auto& x_spec : {P(), rows}) {
        check_matmul(mesh, {x, x_spec}, {w});
        check_matmul(mesh, {x3, x_spec}, {w});
        check_op(
            mesh, {{x, x_spec}, {w}, {bias}},
            [](const std::vector<Array>& in) { return nnx::linear(in[0], in[1], in[2]); },
            [](const std::vector<at::Tensor>& t) { return torch::matmul(t[0], t[1]) + t[2]; });
        check_op(
            mesh, {{x3, x_spec}, {w}, {bias}},
            [](const std::vector<Array>& in) { return nnx::linear(in[0], in[1], in[2]); },
            [](const std::vector<at::Tensor>& t) { return torch::matmul(t[0], t[1]) + t[2]; });
      }
    }
  }
}
