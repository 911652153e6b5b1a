// Op rule tables and planners as data: no MPI, no tensors (the plan cache's case aside). Every layout pair on a 2x2 mesh plans
// to rows of the op's table, layouts that already fit a row cost nothing, and no plan receives
// more than gathering both inputs whole would.
#include "../catch_after_torch.h"

#include <nnx/nnx.h>
#include <nnx/sharding/detail/ops_common.h>
#include <nnx/sharding/detail/plan_cache.h>

#include <torch/types.h>

#include <map>

using nnx::Layout;
using nnx::none;
using nnx::P;
using Catch::Matchers::Contains;

namespace {

const std::map<std::string, int64_t> kMesh{{"a", 2}, {"b", 2}};

// Every layout of `shape` over axes a and b: each dim None, one axis or both (either order),
// each remaining axis optionally pending.
std::vector<Layout> all_layouts(const nnx::Shape& shape, bool with_partial = true) {
  const std::vector<nnx::Axes> entries{{}, {"a"}, {"b"}, {"a", "b"}, {"b", "a"}};
  std::vector<std::vector<nnx::Axes>> dims{{}};
  for (size_t d = 0; d < shape.size(); ++d) {
    std::vector<std::vector<nnx::Axes>> next;
    for (const auto& prefix : dims)
      for (const auto& e : entries) {
        bool clash = false;
        for (const auto& p : prefix)
          for (const auto& axis : e) clash |= nnx::contains(p, axis);
        if (clash) continue;
        next.push_back(prefix);
        next.back().push_back(e);
      }
    dims = std::move(next);
  }
  std::vector<Layout> out;
  for (const auto& d : dims) {
    nnx::Axes free;
    for (const char* axis : {"a", "b"}) {
      bool used = false;
      for (const auto& e : d) used |= nnx::contains(e, axis);
      if (!used) free.push_back(axis);
    }
    for (size_t mask = 0; mask < (with_partial ? (1u << free.size()) : 1u); ++mask) {
      nnx::Axes partial;
      for (size_t i = 0; i < free.size(); ++i)
        if (mask & (1u << i)) partial.push_back(free[i]);
      out.push_back(Layout{shape, d, partial});
    }
  }
  return out;
}

int64_t bytes(const nnx::OpPlan& plan) { return nnx::plan_bytes_per_rank(plan, kMesh, 4); }

// Bytes to make every input replicated with no pending sum: what gathering everything costs.
int64_t gather_all_bytes(const nnx::OpPlan& plan) {
  int64_t total = 0;
  for (const auto& in : plan.inputs) {
    auto whole = nnx::plan_redistribute(in.spec(), in.partial, P(), {}, in.shape.size());
    total += nnx::plan_bytes_per_rank(whole, in.shape, kMesh, 4);
  }
  return total;
}

bool one_axis_per_dim(const Layout& l) {
  for (const auto& d : l.dims)
    if (d.size() > 1) return false;
  return true;
}

void check_output_valid(const nnx::OpPlan& plan) {
  nnx::Axes seen;
  for (const auto& d : plan.output.dims)
    for (const auto& axis : d) {
      CHECK_FALSE(nnx::contains(seen, axis));
      seen.push_back(axis);
    }
  for (const auto& axis : plan.output.partial) {
    CHECK_FALSE(nnx::contains(seen, axis));
    seen.push_back(axis);
  }
}

}  // namespace

TEST_CASE("the rule tables print as rows") {
  const auto& matmul = nnx::rule_table("matmul");
  CHECK(matmul.rows.size() == 9);
  CHECK_THAT(matmul.to_string(), Contains("S(k) · S(k) -> P"));
  CHECK_THAT(matmul.to_string(), Contains("S(m) · R -> S(m)"));
  CHECK(nnx::rule_table("add").rows.back().to_string() == "R · R -> R (none)");
  std::vector<std::string> ops;
  for (const auto& rule : nnx::rule_tables()) ops.push_back(rule.op);
  CHECK(ops == std::vector<std::string>{"matmul", "add", "mul", "div", "where", "sum"});
  const auto& where = nnx::rule_table("where");
  CHECK(where.rows.size() == 9);
  CHECK(where.rows.front().to_string() == "S(i) · S(i) · S(i) -> S(i) (none)");
  CHECK_THAT(where.to_string(), Contains("R · P · P -> P"));
  CHECK_THROWS_WITH(nnx::rule_table("conv"), Contains("no rule table for op 'conv'"));
}

TEST_CASE("matmul plans name their rows and what they receive") {
  // Data parallel x, model parallel w: no communication, output split both ways.
  auto dp = nnx::plan_matmul(Layout::of({8, 16}, P("a", none)), Layout::of({16, 32}, P(none, "b")));
  CHECK_FALSE(dp.communicates());
  CHECK(dp.output.spec() == P("a", "b"));
  REQUIRE(dp.rows.size() == 2);
  CHECK(dp.rows[0].first == "a");
  CHECK(dp.rows[0].second.to_string() == "S(m) · R -> S(m) (none)");
  CHECK(dp.rows[1].second.to_string() == "R · S(n) -> S(n) (none)");

  // Both split over the contraction: a pending sum, no communication yet.
  auto tp = nnx::plan_matmul(Layout::of({8, 16}, P(none, "a")), Layout::of({16, 32}, P("a", none)));
  CHECK_FALSE(tp.communicates());
  CHECK(tp.output.partial == nnx::Axes{"a"});
  CHECK(tp.rows[0].second.output == "P");

  // Only x split over k: w is sliced locally, still no communication.
  auto slice = nnx::plan_matmul(Layout::of({8, 16}, P(none, "a")), Layout::of({16, 32}, P()));
  CHECK_FALSE(slice.communicates());
  CHECK(slice.targets[1].spec() == P("a", none));

  // The same axis on x's m and w's n: w is gathered, 16x16 floats from the peer.
  auto clash = nnx::plan_matmul(Layout::of({8, 16}, P("a", none)), Layout::of({16, 32}, P(none, "a")));
  CHECK(clash.steps[1].to_string() ==
        "PartitionSpec(None, 'a') -> PartitionSpec(None, None): all_gather over 'a' on dim 1");
  CHECK(bytes(clash) == 16 * 16 * 4);
  CHECK_THAT(clash.to_string(), Contains("axis 'a': S(m) · R -> S(m)"));

  // Batched: a's batch split, b broadcasts its batch dim.
  auto batched = nnx::plan_matmul(Layout::of({4, 8, 16}, P("a", none, none)),
                                  Layout::of({1, 16, 32}, P(none, none, "b")));
  CHECK_FALSE(batched.communicates());
  CHECK(batched.output.spec() == P("a", none, "b"));
  CHECK(batched.rows[0].second.to_string() ==
        "S(batch) · R -> S(batch) (none: b broadcasts that batch dim)");
}

TEST_CASE("every matmul layout pair on a 2x2 mesh takes table rows and never costs more than "
          "gathering") {
  int plans = 0;
  for (const auto& x : all_layouts({8, 16}))
    for (const auto& w : all_layouts({16, 32})) {
      auto plan = nnx::plan_matmul(x, w);  // throws if an axis fits no row
      ++plans;
      CHECK(bytes(plan) <= gather_all_bytes(plan));
      check_output_valid(plan);
      CHECK(plan.output.shape == nnx::Shape{8, 32});
    }
  CHECK(plans == 18 * 18);  // per input: 1 layout with 4 choices of sums, 4 with 2, 6 with 1
}

TEST_CASE("layouts whose axes already sit in a matmul row plan no steps") {
  for (const auto& x : all_layouts({8, 16}))
    for (const auto& w : all_layouts({16, 32})) {
      if (!one_axis_per_dim(x) || !one_axis_per_dim(w)) continue;
      auto plan = nnx::plan_matmul(x, w);
      // Does each axis's current placement pair form some row (any output)?
      bool fits = true;
      for (const char* axis : {"a", "b"}) {
        auto where = [&](const Layout& l, const char* m, const char* k, bool is_a) {
          if (nnx::contains(l.partial, axis)) return std::string("P");
          if (nnx::contains(l.dims[0], axis)) return std::string(is_a ? m : k);
          if (nnx::contains(l.dims[1], axis)) return std::string(is_a ? k : m);
          return std::string("R");
        };
        const std::string pa = where(x, "S(m)", "S(k)", true), pb = where(w, "S(n)", "S(k)", false);
        bool row = false;
        for (const auto& r : nnx::rule_table("matmul").rows)
          row |= r.inputs[0] == pa && r.inputs[1] == pb;
        fits &= row;
      }
      INFO(plan.to_string());
      if (fits) {
        CHECK(plan.steps[0].steps.empty());
        CHECK(plan.steps[1].steps.empty());
      } else {
        CHECK((plan.steps[0].steps.size() + plan.steps[1].steps.size()) > 0);
      }
    }
}

TEST_CASE("elementwise plans follow the add, mul and div tables on every layout pair") {
  using L = nnx::Linearity;
  // Same axis on different dims: b moves it with one all_to_all (half its 8x8 block arrives).
  auto moved = nnx::plan_elementwise("add", Layout::of({8, 16}, P("a", none)),
                                     Layout::of({8, 16}, P(none, "a")), L::linear);
  CHECK(moved.steps[1].steps.size() == 1);
  CHECK(moved.steps[1].steps[0].kind == nnx::RedistributeStep::Kind::all_to_all);
  CHECK(bytes(moved) == 8 * 8 * 4 / 2);
  // Sums pending on both sides: add keeps them, mul resolves b's (all_reduce of its block).
  Layout pending{{8, 16}, {{}, {}}, {"a"}};
  CHECK_FALSE(nnx::plan_elementwise("add", pending, pending, L::linear).communicates());
  auto product = nnx::plan_elementwise("mul", pending, pending, L::bilinear);
  CHECK(product.rows[0].second.to_string() == "P · R -> P (none: the sum stays pending until an op "
                                              "needs it whole)");
  CHECK(bytes(product) == 8 * 16 * 4);
  // A replicated operand of add joins a pending sum for free (zeros off coordinate 0).
  auto joined = nnx::plan_elementwise("add", pending, Layout::of({16}, P()), L::linear);
  CHECK_FALSE(joined.communicates());
  CHECK(joined.targets[1].partial == nnx::Axes{"a"});
  CHECK_THROWS_WITH(nnx::plan_elementwise("add", Layout::of({8, 16}, P()),
                                          Layout::of({8, 3}, P()), L::linear),
                    Contains("do not broadcast"));
  // An empty dim stays empty, broadcast against 1 or not (numpy's rule).
  CHECK(nnx::plan_elementwise("add", Layout::of({0, 16}, P(none, "a")),
                              Layout::of({0, 16}, P(none, "a")), L::linear)
            .output.shape == nnx::Shape{0, 16});
  CHECK(nnx::plan_elementwise("mul", Layout::of({1, 16}, P()), Layout::of({0, 1}, P()),
                              L::bilinear)
            .output.shape == nnx::Shape{0, 16});
  CHECK(nnx::plan_where(Layout::of({0, 1}, P()), Layout::of({16}, P("a")), Layout::of({1, 16}, P()))
            .output.shape == nnx::Shape{0, 16});

  int plans = 0;
  for (const nnx::Shape& other : {nnx::Shape{8, 16}, nnx::Shape{16}, nnx::Shape{8, 1}})
    for (const auto& x : all_layouts({8, 16}))
      for (const auto& y : all_layouts(other))
        for (auto [op, linearity] : {std::pair{"add", L::linear}, std::pair{"mul", L::bilinear},
                                     std::pair{"div", L::numerator}}) {
          auto plan = nnx::plan_elementwise(op, x, y, linearity);
          ++plans;
          INFO(plan.to_string());
          CHECK(bytes(plan) <= gather_all_bytes(plan));
          check_output_valid(plan);
          CHECK(plan.output.shape == nnx::Shape{8, 16});
          // Operands laid out alike with no pending sums need no steps.
          if (x == y && x.partial.empty()) CHECK_FALSE(plan.communicates());
        }
  CHECK(plans > 1000);
}

TEST_CASE("where plans lay out the condition, x and y alike; x and y stay pending together") {
  // The output follows x; the condition and y are sliced locally where replicated.
  auto sliced = nnx::plan_where(Layout::of({8, 16}, P()), Layout::of({8, 16}, P("a", "b")),
                                Layout::of({16}, P()));
  CHECK_FALSE(sliced.communicates());
  CHECK(sliced.output.spec() == P("a", "b"));
  CHECK(sliced.targets[0].spec() == P("a", "b"));
  CHECK(sliced.targets[2].spec() == P("b"));
  CHECK(sliced.rows[0].second.to_string() == "S(i) · S(i) · R -> S(i) (none: the others "
                                             "broadcast there)");
  // x pending, y whole: y joins the pending sum; the condition broadcasts along dim 0.
  Layout pending{{8, 16}, {{}, {}}, {"a"}};
  auto joined =
      nnx::plan_where(Layout::of({1, 16}, P(none, "b")), pending, Layout::of({8, 16}, P()));
  CHECK_FALSE(joined.communicates());
  CHECK(joined.output.partial == nnx::Axes{"a"});
  CHECK(joined.targets[2].partial == nnx::Axes{"a"});
  CHECK(joined.output.spec() == P(none, "b"));
  CHECK_THROWS_WITH(nnx::plan_where(Layout::of({8, 16}, P()), Layout::of({8, 16}, P()),
                                    Layout::of({8, 3}, P())),
                    Contains("shapes (8, 16) and (8, 3) do not broadcast"));
  CHECK_THROWS_WITH(nnx::plan_where(pending, Layout::of({8, 16}, P()), Layout::of({8, 16}, P())),
                    Contains("where's condition"));

  int plans = 0;
  for (const auto& c : all_layouts({8, 16}, /*with_partial=*/false))
    for (const auto& x : all_layouts({8, 16}))
      for (const auto& y : all_layouts({16})) {
        auto plan = nnx::plan_where(c, x, y);
        ++plans;
        INFO(plan.to_string());
        CHECK(bytes(plan) <= gather_all_bytes(plan));
        check_output_valid(plan);
        CHECK(plan.output.shape == nnx::Shape{8, 16});
        CHECK(plan.targets[0].partial.empty());
        CHECK(plan.targets[1].partial == plan.targets[2].partial);
        if (c == x && x.partial.empty() && y.dims[0] == x.dims[1] && y.partial.empty())
          CHECK_FALSE(plan.communicates());
      }
  CHECK(plans > 100);
}

TEST_CASE("sum plans never communicate: summed axes become pending") {
  auto plan = nnx::plan_sum(Layout::of({8, 16}, P("a", "b")), {0}, false);
  CHECK(plan.output.spec() == P("b"));
  CHECK(plan.output.partial == nnx::Axes{"a"});
  CHECK(plan.rows[0].second.to_string() ==
        "S(r) -> P (none: each rank sums its block; the sum stays pending)");
  for (const auto& x : all_layouts({8, 16}))
    for (const std::vector<int64_t>& dims : {std::vector<int64_t>{0}, {1}, {0, 1}})
      for (bool keepdim : {false, true}) {
        auto p = nnx::plan_sum(x, dims, keepdim);
        CHECK_FALSE(p.communicates());
        CHECK(p.steps[0].steps.empty());
        check_output_valid(p);
        CHECK(p.output.shape.size() == (keepdim ? 2 : 2 - dims.size()));
      }
}

TEST_CASE("ops take a remembered plan only for the same op, argument and layouts") {
  using nnx::detail::cached_plan;
  auto mesh = nnx::make_mesh({1}, {"x"});
  auto t = torch::ones({4, 4});
  auto rows = nnx::device_put(t, {mesh, P("x", none)});
  auto cols = nnx::device_put(t, {mesh, P(none, "x")});
  auto whole = nnx::device_put(t, {mesh, P()});
  int made = 0;
  auto plan_for = [&](const char* op, int64_t argument, const nnx::Array& a, const nnx::Array& b) {
    return cached_plan(op, argument, {&a, &b}, [&] {
      ++made;
      return nnx::plan_matmul(nnx::detail::layout_of(a), nnx::detail::layout_of(b));
    });
  };
  auto first = plan_for("matmul", 0, rows, whole);
  CHECK(plan_for("matmul", 0, rows, whole) == first);
  CHECK(made == 1);
  auto other = plan_for("matmul", 0, cols, whole);
  CHECK(made == 2);
  CHECK(other->plan.output.partial == nnx::Axes{"x"});
  CHECK(first->plan.output.partial.empty());
  CHECK(first->output_spec == P("x", none));
  plan_for("matmul", 1, rows, whole);   // another argument
  plan_for("matmul2", 0, rows, whole);  // another op
  plan_for("matmul", 0, whole, rows);   // the inputs swapped
  CHECK(made == 5);
  // A spec written out in full is the same layout as its short form.
  auto rows_short = nnx::device_put(t, {mesh, P("x")});
  CHECK(plan_for("matmul", 0, rows_short, whole) == first);
}

TEST_CASE("results of a remembered plan share its output layout, and layouts hash by value") {
  auto mesh = nnx::make_mesh({1}, {"x"});
  nnx::MeshContext on(mesh);
  auto t = torch::arange(16, torch::kFloat).reshape({4, 4});
  auto rows = nnx::device_put(t, {mesh, P("x", none)});
  auto whole = nnx::device_put(t, {mesh, P()});
  auto first = nnx::matmul(rows, whole), second = nnx::matmul(rows, whole);
  CHECK(first.layout() == second.layout());  // one layout, not a copy per result
  CHECK(first.spec() == P("x", none));
  CHECK(first.shape() == nnx::Shape{4, 4});
  CHECK(torch::equal(first.local().cpu(), torch::matmul(t, t)));
  // A copy or a new block keeps the layout; a spec written short hashes as its full form.
  CHECK(first.with_local(t).layout() == first.layout());
  auto rows_short = nnx::device_put(t, {mesh, P("x")});
  CHECK(*rows_short.layout() == *rows.layout());
  CHECK(rows_short.layout()->hash() == rows.layout()->hash());
  CHECK(rows.layout()->hash() != whole.layout()->hash());
  CHECK(rows.layout()->hash() != nnx::device_put(t.reshape({2, 8}), {mesh, P("x")}).layout()->hash());
}

TEST_CASE("results on no mesh share the layout of recent ones of their shape, and only theirs") {
  auto t = torch::ones({3, 5});
  auto first = nnx::relu(nnx::Array(t)), second = nnx::relu(nnx::Array(t));
  CHECK(first.layout() == second.layout());  // no layout made per result
  // Many other shapes in between: each array still has its own shape and a whole spec.
  std::vector<nnx::Array> others;
  for (int64_t n = 1; n <= 20; ++n) others.emplace_back(torch::zeros({n, 5 + n}));
  for (int64_t n = 1; n <= 20; ++n) {
    CHECK(others[n - 1].shape() == nnx::Shape{n, 5 + n});
    CHECK(others[n - 1].spec() == P(none, none));
  }
  CHECK(nnx::Array(torch::ones({3, 5})).shape() == nnx::Shape{3, 5});
  CHECK(*nnx::Array(torch::ones({3, 5})).layout() == *first.layout());
  CHECK(nnx::Array(torch::tensor(2.0f)).shape().empty());
  CHECK(nnx::Array(torch::ones({5, 3})).shape() == nnx::Shape{5, 3});
}

TEST_CASE("replicated results on a mesh share the whole layout of recent ones of their shape") {
  auto mesh = nnx::make_mesh({1}, {"x"});
  auto t = torch::arange(15, torch::kFloat).reshape({3, 5});
  auto whole = nnx::device_put(t, {mesh, P()});
  auto rows = nnx::device_put(t, {mesh, P("x", none)});
  CHECK(whole.layout()->whole());
  CHECK_FALSE(rows.layout()->whole());
  CHECK_FALSE(nnx::matmul(nnx::device_put(t, {mesh, P(none, "x")}),
                          nnx::device_put(t.t().contiguous(), {mesh, P("x", none)}))
                  .layout()
                  ->whole());  // a pending sum
  // A reduction changes the shape: its result takes the whole layout of that shape, once made.
  auto first = nnx::sum(whole, {0}), second = nnx::sum(whole, {0});
  CHECK(first.layout() == second.layout());
  CHECK(first.mesh() == whole.mesh());
  CHECK(first.is_fully_replicated());
  CHECK(first.shape() == nnx::Shape{5});
  CHECK(torch::equal(first.local(), t.sum(0)));
  CHECK(*first.layout() == *nnx::Array(torch::ones({5})).layout());
  // Broadcasting: the result takes an operand's layout where it has its shape, else the whole
  // layout of its own.
  auto column = nnx::device_put(t.narrow(1, 0, 1).contiguous(), {mesh, P()});
  auto row = nnx::device_put(t.narrow(0, 0, 1).contiguous(), {mesh, P()});
  CHECK((whole + column).layout() == whole.layout());
  auto outer = column * row, again = column * row;
  CHECK(outer.layout() == again.layout());
  CHECK(outer.shape() == nnx::Shape{3, 5});
  CHECK(outer.spec() == P(none, none));
  CHECK(torch::equal(outer.local(), t.narrow(1, 0, 1) * t.narrow(0, 0, 1)));
  // Shapes that do not broadcast are named.
  CHECK_THROWS_WITH(whole + nnx::device_put(torch::ones({3}), {mesh, P()}),
                    Contains("shapes (3, 5) and (3,) do not broadcast"));
}
