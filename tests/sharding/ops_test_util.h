// Helpers for the op tests: the meshes a case runs on, the layouts of an array on a mesh, inputs
// placed as leaves (pending sums included), and check_op, which compares an nnx op with LibTorch
// autograd on the whole float64 tensors, forward and backward (design.md §4).
#pragma once

#include "sharding_test_util.h"

#include <nnx/sharding/ops.h>

#include <torch/types.h>
#include <torch/utils.h>
#include "../catch_after_torch.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace nnx_test {

using MeshPtr = std::shared_ptr<const nnx::Mesh>;

// The meshes multi-rank op tests run on: {n} named "x", then meshes_2d(n) named {"a", "b"}.
// Made once: make_mesh is collective and every rank reaches the first call at the same point.
inline const std::vector<MeshPtr>& op_meshes() {
  static const std::vector<MeshPtr> meshes = [] {
    const int n = nnx::world_size();
    std::vector<MeshPtr> out{nnx::make_mesh({n}, {"x"})};
    for (const auto& shape : meshes_2d(n)) out.push_back(nnx::make_mesh(shape, {"a", "b"}));
    return out;
  }();
  return meshes;
}

// The mesh axis a pending-sum input is summed over: the largest axis (the last on ties).
inline std::string partial_axis(const nnx::Mesh& mesh) {
  int64_t best = 0;
  for (int64_t a = 1; a < mesh.ndim(); ++a)
    if (mesh.shape()[a] >= mesh.shape()[best]) best = a;
  return mesh.axis_names()[best];
}

inline nnx::PartitionSpec replicated(size_t rank) {
  return nnx::PartitionSpec(std::vector<nnx::SpecEntry>(rank));
}

inline bool has_tuple(const nnx::PartitionSpec& spec) {
  for (const auto& e : spec.entries())
    if (e.names().size() > 1) return true;
  return false;
}

// Which layouts specs_for lists.
struct SpecOptions {
  bool tuples = false;                 // also entries of two axes: ('a', 'b') and ('b', 'a')
  std::vector<std::string> exclude{};  // axes left out (e.g. the axis of a pending sum)
  std::vector<int64_t> dims{};         // only these dims may be sharded (empty: any dim)
  int64_t max_sharded_dims = 99;
};

// Every layout of an array of `shape` on `mesh` (one entry per dim) that the options allow and
// whose sharded dims divide evenly; the replicated layout first.
inline std::vector<nnx::PartitionSpec> specs_for(const nnx::Shape& shape, const nnx::Mesh& mesh,
                                                 const SpecOptions& options = {}) {
  auto listed = [](const auto& list, const auto& v) {
    return std::find(list.begin(), list.end(), v) != list.end();
  };
  std::vector<std::string> axes;
  for (const auto& a : mesh.axis_names())
    if (!listed(options.exclude, a)) axes.push_back(a);
  std::vector<nnx::SpecEntry> entries{nnx::SpecEntry()};
  for (const auto& a : axes) entries.emplace_back(a);
  if (options.tuples)
    for (const auto& a : axes)
      for (const auto& b : axes)
        if (a != b) entries.emplace_back(std::vector<std::string>{a, b});

  std::vector<std::vector<nnx::SpecEntry>> specs{{}};
  for (size_t d = 0; d < shape.size(); ++d) {
    const bool may_shard = options.dims.empty() || listed(options.dims, static_cast<int64_t>(d));
    std::vector<std::vector<nnx::SpecEntry>> next;
    for (const auto& prefix : specs)
      for (const auto& e : entries) {
        if (!e.is_none() && !may_shard) continue;
        int64_t ways = 1, sharded = e.is_none() ? 0 : 1;
        bool clash = false;
        for (const auto& p : prefix) {
          sharded += p.is_none() ? 0 : 1;
          for (const auto& m : p.names()) clash |= listed(e.names(), m);
        }
        for (const auto& n : e.names()) ways *= mesh.axis_size(n);
        if (clash || shape[d] % ways != 0 || sharded > options.max_sharded_dims) continue;
        auto spec = prefix;
        spec.push_back(e);
        next.push_back(std::move(spec));
      }
    specs = std::move(next);
  }
  std::vector<nnx::PartitionSpec> out;
  for (auto& s : specs) out.emplace_back(std::move(s));
  return out;
}

// Layout pairs for two operands: every pair of one-axis-per-dim layouts, plus each layout with
// a two-axis entry paired with the other operand replicated (and with itself for equal shapes).
inline std::vector<std::pair<nnx::PartitionSpec, nnx::PartitionSpec>> spec_pairs(
    const nnx::Shape& a, const nnx::Shape& b, const nnx::Mesh& mesh) {
  std::vector<std::pair<nnx::PartitionSpec, nnx::PartitionSpec>> out;
  for (const auto& sa : specs_for(a, mesh))
    for (const auto& sb : specs_for(b, mesh)) out.emplace_back(sa, sb);
  for (const auto& t : specs_for(a, mesh, {.tuples = true}))
    if (has_tuple(t)) {
      out.emplace_back(t, replicated(b.size()));
      if (a == b) out.emplace_back(t, t);
    }
  for (const auto& t : specs_for(b, mesh, {.tuples = true}))
    if (has_tuple(t)) out.emplace_back(replicated(a.size()), t);
  return out;
}

// Deterministic whole inputs, identical on every rank.
inline at::Tensor normal_values(const nnx::Shape& shape, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randn(shape, torch::kDouble);
}
// Values in [0.5, 1.5): safe for log, rsqrt and denominators.
inline at::Tensor positive_values(const nnx::Shape& shape, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::rand(shape, torch::kDouble) + 0.5;
}
// Values in +-[0.5, 1.5): nonzero either sign.
inline at::Tensor nonzero_values(const nnx::Shape& shape, uint64_t seed) {
  torch::manual_seed(seed);
  auto magnitude = torch::rand(shape, torch::kDouble) + 0.5;
  return magnitude * (torch::randint(0, 2, shape, torch::kDouble) * 2 - 1);
}
// int64 values in [0, high).
inline at::Tensor integer_values(const nnx::Shape& shape, int64_t high, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(0, high, shape, torch::kLong);
}

// One input of an op: the whole value and how it lies on the mesh. With `partial` axes each
// process holds a piece (unequal pieces: coordinate c of an axis of size s holds
// (c + 1) / (s (s + 1) / 2) of the value) and the pieces sum to the value.
struct In {
  at::Tensor full;
  nnx::PartitionSpec spec{};
  std::vector<std::string> partial{};
};

// 1 when `in` is sharded along `dim` (an op needing that dim whole gathers it), else 0.
inline int64_t sharded_dim(const In& in, int64_t dim) {
  const int64_t rank = in.full.dim();
  if (dim < 0) dim += rank;
  return dim < static_cast<int64_t>(in.spec.size()) && !in.spec[dim].is_none() ? 1 : 0;
}

inline std::string describe(const nnx::PartitionSpec& spec,
                            const std::vector<std::string>& partial) {
  std::string s = spec.to_string();
  if (!partial.empty()) {
    s += " partial(";
    for (size_t i = 0; i < partial.size(); ++i) s += (i ? ", " : "") + partial[i];
    s += ")";
  }
  return s;
}

inline std::string describe(const MeshPtr& mesh, const std::vector<In>& ins) {
  std::ostringstream s;
  s << (mesh ? mesh->to_string() : std::string("no mesh")) << "; inputs:";
  for (const auto& in : ins) {
    s << " " << nnx::to_string(in.full.sizes().vec()) << " "
      << nnx::dtype_name(in.full.scalar_type());
    if (mesh) s << " " << describe(in.spec, in.partial);
    s << ";";
  }
  return s.str();
}

// Layouts of one value: each spec of specs_for(options), then (with `partial`) the value as a
// pending sum over partial_axis(mesh), laid out on the other axes.
inline std::vector<In> layouts(const at::Tensor& full, const nnx::Mesh& mesh,
                               const SpecOptions& options = {}, bool partial = true) {
  std::vector<In> out;
  const nnx::Shape shape = full.sizes().vec();
  for (const auto& s : specs_for(shape, mesh, options)) out.push_back({full, s});
  if (!partial) return out;
  const auto axis = partial_axis(mesh);
  SpecOptions others = options;
  others.exclude.push_back(axis);
  for (const auto& s : specs_for(shape, mesh, others)) out.push_back({full, s, {axis}});
  return out;
}

// Only the pending-sum layouts of layouts().
inline std::vector<In> pending_sum_layouts(const at::Tensor& full, const nnx::Mesh& mesh,
                                           const SpecOptions& options = {}) {
  std::vector<In> out;
  for (auto& in : layouts(full, mesh, options))
    if (!in.partial.empty()) out.push_back(std::move(in));
  return out;
}

// An input placed on the mesh (or a plain Array without one) over a leaf tensor; integer
// inputs get no leaf.
struct Placed {
  nnx::Array array;
  at::Tensor leaf;
};

inline Placed place(const MeshPtr& mesh, const In& in) {
  const bool differentiable = in.full.is_floating_point();
  auto leaf_of = [&](const at::Tensor& t) {
    auto leaf = t.detach().clone();
    if (differentiable) leaf.requires_grad_(true);
    return leaf;
  };
  if (!mesh) {
    auto leaf = leaf_of(in.full);
    return {nnx::Array(leaf), differentiable ? leaf : at::Tensor()};
  }
  at::Tensor piece = in.full;
  for (const auto& axis : in.partial) {
    const double s = static_cast<double>(mesh->axis_size(axis));
    const double c = static_cast<double>(mesh->coordinate(axis));
    piece = piece * ((c + 1) / (s * (s + 1) / 2));
  }
  auto block = nnx::device_put(piece, {mesh, in.spec});
  auto leaf = leaf_of(block.local());
  auto array =
      nnx::Array::from_local(leaf, in.full.sizes().vec(), {mesh, block.spec()}, in.partial);
  return {array, differentiable ? leaf : at::Tensor()};
}

// A full cotangent for an output like y: smooth, nonzero, deterministic (0-d included).
inline at::Tensor cotangent_like(const at::Tensor& y) {
  auto i = torch::arange(y.numel(), torch::kDouble);
  return torch::sin(i * 0.37 + 0.5).reshape(y.sizes());
}

// How check_op judges an op.
struct Check {
  bool promised = true;  // a sharding rule covers these layouts: demand `gathers` fallbacks
  int64_t gathers = 0;   // gathers of a sharded dim the op needs whole (norms, softmax, max)
  bool backward = true;
  double rtol = 1e-10, atol = 1e-12;
};

inline bool close(const at::Tensor& got, const at::Tensor& want, const Check& check) {
  if (!got.defined() || got.sizes() != want.sizes()) return false;
  return torch::allclose(got.detach().to(want.device(), want.scalar_type()), want.detach(),
                         check.rtol, check.atol);
}

inline std::string mismatch(const at::Tensor& got, const at::Tensor& want) {
  std::ostringstream s;
  if (!got.defined()) return "got an undefined tensor";
  s << "got shape " << nnx::to_string(got.sizes().vec()) << ", want "
    << nnx::to_string(want.sizes().vec());
  if (got.sizes() == want.sizes() && want.numel() > 0)
    s << "; max |got - want| = "
      << (got.detach().to(want.device(), torch::kDouble) - want.detach().to(torch::kDouble))
             .abs()
             .max()
             .item<double>();
  return s.str();
}

struct Checked {
  nnx::Array out;    // the op's output (undefined if it threw)
  at::Tensor whole;  // gather(out), detached
};

using NnxFn = std::function<nnx::Array(const std::vector<nnx::Array>&)>;
using TorchFn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

// Runs `op` on the inputs placed on `mesh` (nullptr: plain Arrays) and `oracle` on the whole
// tensors, and checks: no fallback (if promised), output shape, dtype and block, the gathered
// value, and each floating input's exact gradient block under a fixed cotangent, seeded and read
// by the dual-placement rule. An exception is reported as a failure and the case goes on.
inline Checked check_op(const MeshPtr& mesh, const std::vector<In>& ins, const NnxFn& op,
                        const TorchFn& oracle, const Check& check = {}) {
  INFO(describe(mesh, ins));
  std::vector<at::Tensor> xs;
  for (const auto& in : ins) {
    auto x = in.full.detach().clone();
    if (x.is_floating_point()) x.requires_grad_(true);
    xs.push_back(x);
  }
  const at::Tensor y = oracle(xs);
  const at::Tensor g = cotangent_like(y);
  const bool backward = check.backward && y.requires_grad();
  if (backward) y.backward(g);

  // Run everything that may throw first, with no INFO in scope (Catch keeps the messages of
  // scopes an exception unwinds), then check.
  Checked result;
  std::vector<Placed> placed;
  std::vector<nnx::Array> arrays;
  int64_t fallbacks = 0;
  std::vector<at::Tensor> grads(ins.size());
  std::vector<char> missing(ins.size(), 0);
  const char* stage = "placing the inputs";
  try {
    for (const auto& in : ins) {
      placed.push_back(place(mesh, in));
      arrays.push_back(placed.back().array);
    }
    stage = "the op";
    nnx::fallback_count() = 0;
    result.out = op(arrays);
    fallbacks = nnx::fallback_count();
    stage = "gather";
    result.whole = nnx::gather(result.out.with_local(result.out.local().detach()));
    if (backward) {
      stage = "backward";
      result.out.local().backward(seed_cotangent(g, result.out));
      stage = "exact_gradient";
      for (size_t i = 0; i < ins.size(); ++i) {
        const at::Tensor& leaf = placed[i].leaf;
        if (!leaf.defined()) continue;
        // Zeros keep the collectives of exact_gradient in step when a gradient is missing.
        missing[i] = !leaf.grad().defined();
        auto local = leaf.grad().defined() ? leaf.grad() : torch::zeros_like(leaf);
        grads[i] = mesh ? exact_gradient(local, arrays[i]) : local.clone();
      }
    }
  } catch (const std::exception& e) {
    FAIL_CHECK(stage << " threw: " << e.what());
    return result;
  }

  const nnx::Array& out = result.out;
  INFO("output " << nnx::to_string(out.shape()) << " " << describe(out.spec(), out.partial_axes()));
  if (check.promised) CHECK(fallbacks == check.gathers);
  CHECK(out.shape() == y.sizes().vec());
  CHECK(out.dtype() == y.scalar_type());
  CHECK(out.local().sizes().vec() == out.local_box().size);
  {
    INFO("forward: " << mismatch(result.whole, y));
    CHECK(close(result.whole, y, check));
  }
  if (out.partial_axes().empty() && out.shape() == y.sizes().vec()) {
    // The local block is the slice its box names (without relying on gather).
    const auto want = block_of(y.detach(), out);
    INFO("local block: " << mismatch(out.local(), want));
    CHECK(close(out.local(), want, check));
  }
  for (size_t i = 0; i < ins.size() && backward; ++i) {
    if (!grads[i].defined()) continue;
    INFO("gradient of input " << i);
    CHECK_FALSE(missing[i]);
    auto want =
        block_of(xs[i].grad().defined() ? xs[i].grad() : torch::zeros_like(xs[i]), arrays[i]);
    INFO(mismatch(grads[i], want));
    CHECK(close(grads[i], want, check));
  }
  return result;
}

// The usual shapes of check_op: one input, two inputs.
inline Checked check_unary(const MeshPtr& mesh, const In& x,
                           const std::function<nnx::Array(const nnx::Array&)>& op,
                           const std::function<at::Tensor(const at::Tensor&)>& oracle,
                           const Check& check = {}) {
  return check_op(
      mesh, {x}, [&](const std::vector<nnx::Array>& a) { return op(a[0]); },
      [&](const std::vector<at::Tensor>& t) { return oracle(t[0]); }, check);
}

inline Checked check_binary(
    const MeshPtr& mesh, const In& a, const In& b,
    const std::function<nnx::Array(const nnx::Array&, const nnx::Array&)>& op,
    const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& oracle,
    const Check& check = {}) {
  return check_op(
      mesh, {a, b}, [&](const std::vector<nnx::Array>& x) { return op(x[0], x[1]); },
      [&](const std::vector<at::Tensor>& t) { return oracle(t[0], t[1]); }, check);
}

}  // namespace nnx_test
