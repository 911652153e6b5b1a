// Redistribution plans as data: computed from two layouts alone (no MPI, no tensors), checked
// step by step and by the bytes each rank receives, over every pair of layouts on a 2x4 mesh.
#include "../catch_after_torch.h"

#include <nnx/nnx.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

using nnx::none;
using nnx::P;
using K = nnx::RedistributeStep::Kind;
using Catch::Matchers::Contains;

namespace {

const std::map<std::string, int64_t> kAxes{{"a", 2}, {"b", 4}};

std::vector<std::string> kinds(const nnx::RedistributePlan& plan) {
  std::vector<std::string> out;
  for (const auto& s : plan.steps) out.push_back(s.name());
  return out;
}

nnx::RedistributePlan plan(const nnx::PartitionSpec& from, const nnx::PartitionSpec& to,
                           std::vector<std::string> from_partial = {},
                           std::vector<std::string> to_partial = {}) {
  return nnx::plan_redistribute(from, from_partial, to, to_partial, 2);
}

// The layout the plan's steps lead to from (plan.from, plan.from_partial), replayed here by what
// each step does to a layout, independently of the planner's own bookkeeping: a gather or an
// all_to_all frees the minor axis of its dim, a slice or a reduce_scatter adds the axis as the
// minor one, an all_reduce resolves a pending sum and to_partial makes one.
std::pair<nnx::PartitionSpec, std::vector<std::string>> replay(const nnx::RedistributePlan& plan) {
  std::vector<std::vector<std::string>> dims;
  for (const auto& entry : plan.from.entries()) dims.push_back(entry.names());
  std::vector<std::string> partial = plan.from_partial;
  const auto take_minor = [&](const nnx::RedistributeStep& s) {
    INFO(s.to_string());
    REQUIRE(!dims.at(s.dim).empty());
    REQUIRE(dims.at(s.dim).back() == s.axis);  // only the minor axis can be freed alone
    dims.at(s.dim).pop_back();
  };
  const auto resolve = [&](const nnx::RedistributeStep& s) {
    const auto it = std::find(partial.begin(), partial.end(), s.axis);
    REQUIRE(it != partial.end());
    partial.erase(it);
  };
  for (const auto& s : plan.steps) {
    switch (s.kind) {
      case K::all_gather: take_minor(s); break;
      case K::all_to_all: take_minor(s), dims.at(s.to_dim).push_back(s.axis); break;
      case K::slice: dims.at(s.dim).push_back(s.axis); break;
      case K::reduce_scatter: resolve(s), dims.at(s.dim).push_back(s.axis); break;
      case K::all_reduce: resolve(s); break;
      case K::to_partial: partial.push_back(s.axis); break;
    }
  }
  std::vector<nnx::SpecEntry> entries;
  for (auto& axes : dims) entries.emplace_back(std::move(axes));
  return {nnx::PartitionSpec(std::move(entries)), partial};
}

}  // namespace

TEST_CASE("a plan moves a lone axis between dims with one all_to_all") {
  auto p = plan(P("a", none), P(none, "a"));
  REQUIRE(p.steps.size() == 1);
  CHECK(p.steps[0].kind == K::all_to_all);
  CHECK(p.steps[0].axis == "a");
  CHECK(p.steps[0].dim == 0);
  CHECK(p.steps[0].to_dim == 1);
  CHECK(p.to_string() ==
        "PartitionSpec('a', None) -> PartitionSpec(None, 'a'): all_to_all over 'a' from dim 0 to "
        "dim 1");
  // [8, 16] float32 on a=2: a block of 4x16x4 = 256 bytes, half of it arrives from the peer.
  CHECK(nnx::plan_bytes_per_rank(p, {8, 16}, kAxes, 4) == 128);
}

TEST_CASE("a plan gathers minor axes first and slices without communication") {
  auto gather = plan(P({"a", "b"}, none), P("a", none));
  REQUIRE(gather.steps.size() == 1);
  CHECK(gather.steps[0].kind == K::all_gather);
  CHECK(gather.steps[0].axis == "b");
  // Block [1, 16] of 4 bytes: 3 more blocks arrive over b.
  CHECK(nnx::plan_bytes_per_rank(gather, {8, 16}, kAxes, 4) == 3 * 64);

  auto slice = plan(P(), P("a", "b"));
  CHECK(kinds(slice) == std::vector<std::string>{"slice", "slice"});
  CHECK(nnx::plan_bytes_per_rank(slice, {8, 16}, kAxes, 4) == 0);
  CHECK_FALSE(slice.steps[0].communicates());

  CHECK(plan(P("a", "b"), P("a", "b")).steps.empty());
  CHECK(plan(P("a", "b"), P("a", "b")).to_string() ==
        "PartitionSpec('a', 'b') -> PartitionSpec('a', 'b'): (no steps)");
}

TEST_CASE("pending sums reduce-scatter into the dim that gains their axis, else all-reduce") {
  auto scatter = plan(P(), P("a", none), {"a"});
  CHECK(kinds(scatter) == std::vector<std::string>{"reduce_scatter"});
  CHECK(scatter.steps[0].dim == 0);
  // A whole [8, 16] block of 512 bytes: half of it arrives.
  CHECK(nnx::plan_bytes_per_rank(scatter, {8, 16}, kAxes, 4) == 256);

  auto reduce = plan(P(), P(), {"a"});
  CHECK(kinds(reduce) == std::vector<std::string>{"all_reduce"});
  CHECK(nnx::plan_bytes_per_rank(reduce, {8, 16}, kAxes, 4) == 512);

  auto keep = plan(P(), P(), {"a"}, {"a"});
  CHECK(keep.steps.empty());
  CHECK(kinds(plan(P(), P(), {}, {"b"})) == std::vector<std::string>{"to_partial"});
  CHECK_THROWS_WITH(plan(P(), P("a", none), {}, {"a"}),
                    Contains("axis 'a' cannot be both partial and sharding a dim"));
}

TEST_CASE("every pair of layouts on a 2x4 mesh gets a plan that ends at the target") {
  const std::vector<nnx::PartitionSpec> layouts = {
      P(),          P("a", none), P("b", none), P({"a", "b"}, none), P({"b", "a"}, none),
      P(none, "a"), P(none, "b"), P("a", "b"),  P("b", "a"),         P(none, {"a", "b"})};
  const nnx::Shape shape{16, 32};
  for (const auto& from : layouts)
    for (const auto& to : layouts) {
      INFO(from.to_string() << " -> " << to.to_string());
      auto p = plan(from, to);
      // The steps themselves lead to `to` (p.to is the target it was given).
      CHECK(replay(p).first == nnx::pad_spec(to, 2));
      CHECK(replay(p).second.empty());
      // Never more than gathering the whole array and slicing it again.
      const int64_t whole = 16 * 32 * 4;
      CHECK(nnx::plan_bytes_per_rank(p, shape, kAxes, 4) <= whole);
      // Only gathers and all_to_all move data here (no pending sums in these layouts).
      for (const auto& s : p.steps)
        CHECK((s.kind == K::all_gather || s.kind == K::all_to_all || s.kind == K::slice));
      // Nothing to do exactly when the layouts agree.
      CHECK(p.steps.empty() == (nnx::pad_spec(from, 2) == nnx::pad_spec(to, 2)));
    }
  // With pending sums over the axes each layout leaves free, on either side.
  const auto sums_free_of = [](const nnx::PartitionSpec& spec) {
    const auto used = spec.axis_names();
    std::vector<std::vector<std::string>> out{{}};
    for (const std::string axis : {"a", "b"})
      if (std::find(used.begin(), used.end(), axis) == used.end())
        for (size_t i = 0, n = out.size(); i < n; ++i) {
          auto more = out[i];
          more.push_back(axis);
          out.push_back(more);
        }
    return out;
  };
  for (const auto& from : layouts)
    for (const auto& to : layouts)
      for (const auto& from_partial : sums_free_of(from))
        for (const auto& to_partial : sums_free_of(to)) {
          INFO(from.to_string() << " partial(" << fmt::format("{}", fmt::join(from_partial, ","))
                                << ") -> " << to.to_string() << " partial("
                                << fmt::format("{}", fmt::join(to_partial, ",")) << ")");
          auto [spec, partial] = replay(plan(from, to, from_partial, to_partial));
          CHECK(spec == nnx::pad_spec(to, 2));
          std::sort(partial.begin(), partial.end());
          CHECK(partial == to_partial);
        }
}
