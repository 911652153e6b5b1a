// Redistribution plan: resolve pending sums (reduce_scatter or all_reduce), swap a dim's axis
// to another dim (all_to_all), gather the minor axes a dim loses (all_gather), slice the axes
// it gains (no communication), and mark new pending sums (kept on coordinate 0).
#include <nnx/framework/error.h>
#include <nnx/sharding/differentiable_collectives.h>
#include <nnx/sharding/redistribute.h>
#include <nnx/sharding/spec_check.h>

#include <torch/torch.h>

#include <algorithm>

namespace nnx {

RedistributeCounts& redistribute_counts() {
  thread_local RedistributeCounts counts;
  return counts;
}

namespace {

using Axes = std::vector<std::string>;

bool contains(const Axes& axes, const std::string& a) {
  return std::find(axes.begin(), axes.end(), a) != axes.end();
}

std::vector<Axes> axes_per_dim(const PartitionSpec& spec) {
  std::vector<Axes> out;
  for (const auto& e : spec.entries()) out.push_back(e.names());
  return out;
}

PartitionSpec spec_of(const std::vector<Axes>& axes) {
  std::vector<SpecEntry> entries;
  for (const auto& a : axes) entries.push_back(SpecEntry(a));
  return PartitionSpec(std::move(entries));
}

bool is_prefix(const Axes& prefix, const Axes& of) {
  return prefix.size() <= of.size() && std::equal(prefix.begin(), prefix.end(), of.begin());
}

// The working layout while a plan runs.
struct Layout {
  at::Tensor local;
  std::vector<Axes> dims;
  Axes partial;
};

}  // namespace

Array device_put(const at::Tensor& full, const NamedSharding& sharding) {
  NNX_CHECK(sharding.mesh && sharding.mesh->is_bound(),
            "device_put needs a mesh made by nnx::make_mesh");
  Shape shape = full.sizes().vec();
  auto spec = pad_spec(sharding.spec, shape.size());
  check_spec(spec, shape, *sharding.mesh, "device_put");
  Box box = block_of(shape, spec, *sharding.mesh, sharding.mesh->coordinates());
  at::Tensor local = full;
  for (size_t d = 0; d < shape.size(); ++d)
    if (box.size[d] != shape[d]) local = local.narrow(d, box.start[d], box.size[d]);
  return Array::from_local(local, shape, NamedSharding{sharding.mesh, spec});
}

Array make_array_from_process_local_data(const NamedSharding& sharding, const at::Tensor& local) {
  NNX_CHECK(sharding.mesh && sharding.mesh->is_bound(),
            "make_array_from_process_local_data needs a mesh made by nnx::make_mesh");
  auto spec = pad_spec(sharding.spec, local.dim());
  NNX_CHECK(spec.size() == static_cast<size_t>(local.dim()),
            "{} is longer than the local data's rank {}", sharding.spec.to_string(), local.dim());
  Shape shape = local.sizes().vec();
  for (size_t d = 0; d < spec.size(); ++d)
    for (const auto& a : spec[d].names()) shape[d] *= sharding.mesh->axis_size(a);
  return Array::from_local(local, shape, NamedSharding{sharding.mesh, spec});
}

at::Tensor gather(const Array& x) {
  if (x.is_fully_replicated()) return x.local();
  return redistribute(x, PartitionSpec()).local();
}

Array redistribute(const Array& x, const PartitionSpec& spec,
                   const std::vector<std::string>& partial_axes) {
  NNX_CHECK(x.mesh() != nullptr, "the array is on no mesh; use device_put to place it on one");
  return redistribute(x, NamedSharding{x.mesh(), spec}, partial_axes);
}

Array redistribute(const Array& x, const NamedSharding& target,
                   const std::vector<std::string>& partial_axes) {
  NNX_CHECK(x.mesh() != nullptr, "the array is on no mesh; use device_put to place it on one");
  NNX_CHECK(*target.mesh == *x.mesh(), "cannot redistribute from {} to another mesh {}",
            x.mesh()->to_string(), target.mesh->to_string());
  const Mesh& mesh = *x.mesh();
  auto target_spec = pad_spec(target.spec, x.shape().size());
  check_spec(target_spec, x.shape(), mesh, "redistribute");
  for (const auto& a : partial_axes)
    NNX_CHECK(!contains(target_spec.axis_names(), a),
              "axis '{}' cannot be both partial and sharding a dim in the target", a);
  auto& counts = redistribute_counts();
  const auto want = axes_per_dim(target_spec);
  Layout now{x.local(), axes_per_dim(x.spec()), x.partial_axes()};
  auto coordinate = [&](const std::string& a) { return mesh.coordinate(a); };

  // 1. Pending sums the target does not keep: reduce_scatter into a dim whose target axes are
  //    its current ones followed by this axis (it splits this rank's block further); otherwise
  //    all_reduce.
  for (const auto& a : Axes(now.partial)) {
    if (contains(partial_axes, a)) continue;
    now.partial.erase(std::find(now.partial.begin(), now.partial.end(), a));
    int64_t into = -1;
    for (size_t d = 0; d < want.size(); ++d) {
      Axes then = now.dims[d];
      then.push_back(a);
      if (want[d] == then) into = static_cast<int64_t>(d);
    }
    if (into >= 0) {
      now.local = detail::reduce_scatter_ad(now.local, mesh.comm(a), into);
      now.dims[into].push_back(a);
      ++counts.reduce_scatter;
    } else {
      now.local = detail::all_reduce_ad(now.local, mesh.comm(a));
      ++counts.all_reduce;
    }
  }

  // 2. A dim split by one axis that another whole dim wants alone: all_to_all.
  for (size_t d = 0; d < now.dims.size(); ++d) {
    if (now.dims[d].size() != 1 || is_prefix(now.dims[d], want[d])) continue;
    const auto a = now.dims[d][0];
    for (size_t e = 0; e < want.size(); ++e) {
      if (e == d || want[e] != Axes{a} || !now.dims[e].empty()) continue;
      now.local = detail::all_to_all_ad(now.local, mesh.comm(a), e, d);
      now.dims[d].clear();
      now.dims[e] = {a};
      ++counts.all_to_all;
      break;
    }
  }

  // 3. Gather, most minor first, the axes a dim holds beyond its common prefix with the target.
  for (size_t d = 0; d < now.dims.size(); ++d) {
    size_t keep = 0;
    while (keep < now.dims[d].size() && keep < want[d].size() && now.dims[d][keep] == want[d][keep])
      ++keep;
    while (now.dims[d].size() > keep) {
      now.local = detail::all_gather_ad(now.local, mesh.comm(now.dims[d].back()), d);
      now.dims[d].pop_back();
      ++counts.all_gather;
    }
  }

  // 4. Slice the axes a dim gains (the block of this process; its gradient is a partial sum).
  for (size_t d = 0; d < want.size(); ++d)
    for (size_t k = now.dims[d].size(); k < want[d].size(); ++k) {
      const auto& a = want[d][k];
      int64_t size = now.local.size(d) / mesh.axis_size(a);
      now.local = now.local.narrow(d, coordinate(a) * size, size);
      now.dims[d].push_back(a);
      ++counts.local_slice;
    }

  // 5. New pending sums: the value stays on coordinate 0 of the axis, zeros elsewhere.
  for (const auto& a : partial_axes) {
    if (contains(now.partial, a)) continue;
    if (coordinate(a) != 0) now.local = now.local * 0;
    now.partial.push_back(a);
    ++counts.to_partial;
  }
  return Array::from_local(now.local, x.shape(), NamedSharding{target.mesh, spec_of(now.dims)},
                           now.partial);
}

}  // namespace nnx
