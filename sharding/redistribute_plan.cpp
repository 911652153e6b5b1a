// Planning a redistribution from two layouts (see redistribute_plan.h).
#include <nnx/core/error.h>
#include <nnx/sharding/redistribute_plan.h>
#include <nnx/sharding/spec_check.h>

#include <fmt/format.h>

#include <algorithm>

namespace nnx {

namespace {

std::vector<Axes> axes_per_dim(const PartitionSpec& spec, size_t rank) {
  std::vector<Axes> out;
  const PartitionSpec padded = pad_spec(spec, rank);
  for (const auto& e : padded.entries()) out.push_back(e.names());
  return out;
}

PartitionSpec spec_of(const std::vector<Axes>& dims) {
  std::vector<SpecEntry> entries;
  for (const auto& d : dims) entries.emplace_back(d);
  return PartitionSpec(std::move(entries));
}

bool is_prefix(const Axes& prefix, const Axes& of) {
  return prefix.size() <= of.size() && std::equal(prefix.begin(), prefix.end(), of.begin());
}

}  // namespace

const char* RedistributeStep::name() const {
  switch (kind) {
    case RedistributeStep::Kind::reduce_scatter: return "reduce_scatter";
    case RedistributeStep::Kind::all_reduce: return "all_reduce";
    case RedistributeStep::Kind::all_to_all: return "all_to_all";
    case RedistributeStep::Kind::all_gather: return "all_gather";
    case RedistributeStep::Kind::slice: return "slice";
    case RedistributeStep::Kind::to_partial: return "to_partial";
  }
  return "?";
}

namespace {

std::string partial_suffix(const Axes& partial) {
  return partial.empty() ? "" : fmt::format(" + pending sum over ({})", fmt::join(partial, ", "));
}

}  // namespace

std::string RedistributeStep::to_string() const {
  using K = Kind;
  switch (kind) {
    case K::all_reduce: return fmt::format("all_reduce over '{}'", axis);
    case K::to_partial: return fmt::format("to_partial over '{}' (zeros off coordinate 0)", axis);
    case K::all_to_all:
      return fmt::format("all_to_all over '{}' from dim {} to dim {}", axis, dim, to_dim);
    case K::slice: return fmt::format("slice dim {} by '{}' (local)", dim, axis);
    default: return fmt::format("{} over '{}' on dim {}", name(), axis, dim);
  }
}

std::string RedistributePlan::to_string() const {
  std::vector<std::string> steps_text;
  for (const auto& s : steps) steps_text.push_back(s.to_string());
  return fmt::format("{}{} -> {}{}: {}", from.to_string(), partial_suffix(from_partial),
                     to.to_string(), partial_suffix(to_partial),
                     steps.empty() ? "(no steps)" : fmt::format("{}", fmt::join(steps_text, "; ")));
}

RedistributePlan plan_redistribute(const PartitionSpec& from, const Axes& from_partial,
                                   const PartitionSpec& to, const Axes& to_partial, size_t rank) {
  using K = RedistributeStep::Kind;
  RedistributePlan plan{pad_spec(from, rank), pad_spec(to, rank), from_partial, to_partial, {}};
  const auto want = axes_per_dim(to, rank);
  auto now = axes_per_dim(from, rank);
  NNX_CHECK(now.size() == rank && want.size() == rank, "{} or {} does not fit rank {}",
            from.to_string(), to.to_string(), rank);
  for (const auto& a : to_partial)
    NNX_CHECK(!contains(plan.to.axis_names(), a),
              "axis '{}' cannot be both partial and sharding a dim in the target {}", a,
              plan.to.to_string());
  Axes partial = from_partial;

  // 1. Pending sums the target drops.
  for (const auto& a : Axes(partial)) {
    if (contains(to_partial, a)) continue;
    partial.erase(std::find(partial.begin(), partial.end(), a));
    int64_t into = -1;
    for (size_t d = 0; d < rank; ++d) {
      Axes then = now[d];
      then.push_back(a);
      if (want[d] == then) into = static_cast<int64_t>(d);
    }
    if (into >= 0) {
      plan.steps.push_back({K::reduce_scatter, a, into});
      now[into].push_back(a);
    } else {
      plan.steps.push_back({K::all_reduce, a});
    }
  }
  // 2. A dim split by one axis that another, unsplit dim wants alone.
  for (size_t d = 0; d < rank; ++d) {
    if (now[d].size() != 1 || is_prefix(now[d], want[d])) continue;
    const auto a = now[d][0];
    for (size_t e = 0; e < rank; ++e) {
      if (e == d || want[e] != Axes{a} || !now[e].empty()) continue;
      plan.steps.push_back({K::all_to_all, a, static_cast<int64_t>(d), static_cast<int64_t>(e)});
      now[d].clear();
      now[e] = {a};
      break;
    }
  }
  // 3. Gather, most minor first, the axes a dim holds beyond its common prefix with the target.
  for (size_t d = 0; d < rank; ++d) {
    size_t keep = 0;
    while (keep < now[d].size() && keep < want[d].size() && now[d][keep] == want[d][keep]) ++keep;
    while (now[d].size() > keep) {
      plan.steps.push_back({K::all_gather, now[d].back(), static_cast<int64_t>(d)});
      now[d].pop_back();
    }
  }
  // 4. Slice the axes a dim gains.
  for (size_t d = 0; d < rank; ++d)
    for (size_t k = now[d].size(); k < want[d].size(); ++k) {
      plan.steps.push_back({K::slice, want[d][k], static_cast<int64_t>(d)});
      now[d].push_back(want[d][k]);
    }
  // 5. New pending sums.
  for (const auto& a : to_partial)
    if (!contains(partial, a)) plan.steps.push_back({K::to_partial, a});
  NNX_CHECK(now == want, "internal: the plan ends at {}, not at {}", spec_of(now).to_string(),
            plan.to.to_string());
  return plan;
}

int64_t plan_bytes_per_rank(const RedistributePlan& plan, const Shape& shape,
                            const std::map<std::string, int64_t>& axis_sizes, int64_t itemsize) {
  auto size_of = [&](const std::string& a) {
    auto it = axis_sizes.find(a);
    NNX_CHECK(it != axis_sizes.end() && it->second > 0, "no size given for mesh axis '{}'", a);
    return it->second;
  };
  NNX_CHECK(shape.size() == plan.from.size(), "shape {} does not fit the plan's {}",
            to_string(shape), plan.from.to_string());
  int64_t block = itemsize;  // bytes of this rank's block, as the plan runs
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t split = 1;
    for (const auto& a : plan.from[d].names()) split *= size_of(a);
    block *= shape[d] / split;
  }
  int64_t received = 0;
  using K = RedistributeStep::Kind;
  for (const auto& step : plan.steps) {
    const int64_t n = size_of(step.axis);
    switch (step.kind) {
      case K::all_gather: received += (n - 1) * block; block *= n; break;
      case K::reduce_scatter: received += (n - 1) * block / n; block /= n; break;
      case K::all_to_all: received += (n - 1) * block / n; break;
      case K::all_reduce: received += 2 * (n - 1) * block / n; break;
      case K::slice: block /= n; break;
      case K::to_partial: break;
    }
  }
  return received;
}

}  // namespace nnx
