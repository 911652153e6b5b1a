// matmul's planner (its table is in op_rules.cpp). Per mesh axis, where the inputs hold it now
// decides the row: a's pending sum, then a's batch, m and k dims, then b's batch, k and n dims
// and pending sum; an axis both inputs claim stays with the first and is gathered on b.
#include <nnx/core/error.h>
#include <nnx/sharding/op_plan.h>
#include <nnx/sharding/detail/plan_rows.h>

#include <algorithm>

namespace nnx {

OpPlan plan_matmul(const Layout& a, const Layout& b) {
  const int64_t na = a.shape.size(), nb = b.shape.size();
  NNX_CHECK(na >= 2 && nb >= 2 && a.shape[na - 1] == b.shape[nb - 2],
            "shapes {} and {} do not contract", to_string(a.shape), to_string(b.shape));
  const int64_t batch_a = na - 2, batch_b = nb - 2, batch = std::max(batch_a, batch_b);
  Shape shape(batch);
  for (int64_t i = 0; i < batch; ++i) {
    int64_t da = i < batch - batch_a ? 1 : a.shape[i - (batch - batch_a)];
    int64_t db = i < batch - batch_b ? 1 : b.shape[i - (batch - batch_b)];
    NNX_CHECK(da == db || da == 1 || db == 1, "batch dims of {} and {} do not broadcast",
              to_string(a.shape), to_string(b.shape));
    shape[i] = std::max(da, db);
  }
  shape.push_back(a.shape[na - 2]);
  shape.push_back(b.shape[nb - 1]);

  std::vector<Axes> out(shape.size());
  Axes used = a.partial;
  auto take = [&](const Axes& axes) {
    Axes free;
    for (const auto& axis : axes)
      if (!contains(used, axis)) free.push_back(axis);
    used.insert(used.end(), free.begin(), free.end());
    return free;
  };
  // Whether input dim `d` of an input with `nbatch` batch dims spans output batch dim i.
  auto spans = [&](const Layout& x, int64_t nbatch, int64_t i) {
    int64_t d = i - (batch - nbatch);
    return d >= 0 && x.shape[d] == shape[i] ? d : -1;
  };
  for (int64_t i = 0; i < batch; ++i)
    if (int64_t d = spans(a, batch_a, i); d >= 0) out[i] = take(a.dims[d]);
  const Axes m_axes = take(a.dims[na - 2]);
  Axes k_axes = take(a.dims[na - 1]);
  for (int64_t i = 0; i < batch; ++i)
    if (int64_t d = spans(b, batch_b, i); out[i].empty() && d >= 0) out[i] = take(b.dims[d]);
  if (k_axes.empty()) k_axes = take(b.dims[nb - 2]);
  const Axes n_axes = take(b.dims[nb - 1]);
  out[batch] = m_axes;
  out[batch + 1] = n_axes;

  // Targets: each input spans its batch dims as the output does; k split alike on both.
  Layout ta{a.shape, std::vector<Axes>(na), a.partial};
  Layout tb{b.shape, std::vector<Axes>(nb), {}};
  for (int64_t i = 0; i < batch; ++i) {
    if (int64_t d = spans(a, batch_a, i); d >= 0) ta.dims[d] = out[i];
    if (int64_t d = spans(b, batch_b, i); d >= 0) tb.dims[d] = out[i];
  }
  ta.dims[na - 2] = m_axes;
  ta.dims[na - 1] = k_axes;
  tb.dims[nb - 2] = k_axes;
  tb.dims[nb - 1] = n_axes;
  // b may stay pending along axes nothing else uses.
  for (const auto& axis : b.partial)
    if (!contains(used, axis)) tb.partial.push_back(axis);
  Axes partial = ta.partial;
  partial.insert(partial.end(), tb.partial.begin(), tb.partial.end());
  partial.insert(partial.end(), k_axes.begin(), k_axes.end());

  OpPlan plan{"matmul", {a, b}, {std::move(ta), std::move(tb)}, {},
              Layout{std::move(shape), std::move(out), std::move(partial)}, {}};
  // Roles for the row check: batch dims map to their output dim, m and n to theirs.
  auto roles = [&](int64_t nbatch, const char* second_last, const char* last,
                   int64_t second_last_out, int64_t last_out) {
    std::vector<detail::DimRole> r;
    for (int64_t d = 0; d < nbatch; ++d) r.push_back({"batch", d + (batch - nbatch)});
    r.push_back({second_last, second_last_out});
    r.push_back({last, last_out});
    return r;
  };
  std::vector<detail::DimRole> out_roles;
  for (int64_t i = 0; i < batch; ++i) out_roles.push_back({"batch", i});
  out_roles.push_back({"m", batch});
  out_roles.push_back({"n", batch + 1});
  detail::finish_plan(plan, rule_table("matmul"),
                      {roles(batch_a, "m", "k", batch, -1), roles(batch_b, "k", "n", -1, batch + 1)},
                      out_roles);
  return plan;
}

}  // namespace nnx
