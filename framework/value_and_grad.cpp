// Gradient leaves, backward, and the reduction of partial gradients: bucketed all-reduces, or
// for ZeRO parameters (optimizer_sharding) a reduce-scatter into their optimizer state's layout.
#include <nnx/framework/error.h>
#include <nnx/framework/value_and_grad.h>
#include <nnx/optim/zero.h>
#include <nnx/sharding/gradient.h>
#include <nnx/sharding/redistribute.h>
#include <nnx/sharding/world.h>

#include <torch/torch.h>

#include <map>
#include <optional>

namespace nnx {

int64_t& gradient_all_reduce_count() {
  thread_local int64_t count = 0;
  return count;
}

namespace detail {

namespace {

}  // namespace

State prepare_grad_leaves(Module& module, const Filter& wrt) {
  State leaves = state(module, wrt);
  for (auto& [path, v] : leaves) {
    const Array& value = v.value();
    NNX_CHECK(!value.is_abstract(), "'{}' has no values (abstract); materialize the model first",
              path);
    NNX_CHECK(at::isFloatingType(value.dtype()),
              "'{}' is {} and cannot take a gradient; exclude it with the wrt filter", path,
              dtype_name(value.dtype()));
    v.set_value(value.with_local(value.local().detach().requires_grad_(true)));
  }
  return leaves;
}

State reduce_grads(const Array& loss, State& leaves, int64_t bucket_cap_bytes) {
  NNX_CHECK(loss.ndim() == 0, "the loss must be a scalar Array, got shape {}", to_string(loss.shape()));
  NNX_CHECK(bucket_cap_bytes > 0, "bucket_cap_bytes must be positive, got {}", bucket_cap_bytes);
  if (loss.local().requires_grad()) loss.local().backward(loss_cotangent(loss));
  // Local gradients, detached leaves again; a parameter no gradient reached is an error.
  std::vector<at::Tensor> local(leaves.size());
  std::vector<std::string> missing;
  size_t i = 0;
  for (auto& [path, v] : leaves) {
    at::Tensor t = v.tensor();
    local[i] = t.grad().defined() ? t.grad().detach() : at::Tensor();
    if (!local[i].defined()) missing.push_back(path);
    v.set_value(v.value().with_local(t.detach()));
    ++i;
  }
  // Every rank must agree that all gradients exist, or the reduction below would hang.
  int64_t missing_here = static_cast<int64_t>(missing.size());
  auto flag = torch::full({1}, missing_here, torch::kLong);
  Communicator::world().all_reduce_(flag, ReduceOp::max);
  NNX_CHECK(flag.item<int64_t>() == 0,
            "no gradient reached {} on rank {} ({} parameter(s) on some rank); every rank must use "
            "every parameter in the loss, or leave it out with the wrt filter",
            missing.empty() ? std::string("any parameter") : fmt::format("{}", fmt::join(missing, ", ")),
            world_rank(), flag.item<int64_t>());

  // ZeRO parameters: each rank keeps only its slice of the gradient (optim/zero.h).
  std::vector<std::optional<PartitionSpec>> zero_spec;
  for (auto& [path, v] : leaves) zero_spec.push_back(optim::optimizer_spec(path, v));

  // Buckets: parameters with the same replica axes and dtype, in state order, up to the cap.
  struct Bucket {
    std::vector<size_t> members;
    int64_t bytes = 0;
  };
  std::vector<std::pair<std::string, Bucket>> buckets;  // key, bucket; in order of creation
  std::map<std::string, size_t> open;                    // key -> index of its open bucket
  std::vector<std::vector<std::string>> axes_of(leaves.size());
  i = 0;
  for (auto& [path, v] : leaves) {
    axes_of[i] = replica_axes(v.value());
    if (!axes_of[i].empty() && !zero_spec[i]) {
      std::string key = fmt::format("{}|{}|{}", static_cast<const void*>(v.value().mesh().get()),
                                    fmt::join(axes_of[i], ","), dtype_name(v.dtype()));
      int64_t bytes = local[i].numel() * static_cast<int64_t>(local[i].element_size());
      auto it = open.find(key);
      if (it == open.end() || buckets[it->second].second.bytes + bytes > bucket_cap_bytes) {
        buckets.emplace_back(key, Bucket{});
        open[key] = buckets.size() - 1;
        it = open.find(key);
      }
      auto& b = buckets[it->second].second;
      b.members.push_back(i);
      b.bytes += bytes;
    }
    ++i;
  }
  std::vector<const Variable*> by_index;
  for (auto& [path, v] : leaves) by_index.push_back(&v);
  for (auto& [key, bucket] : buckets) {
    std::vector<at::Tensor> flat;
    for (size_t m : bucket.members) flat.push_back(local[m].reshape(-1));
    at::Tensor buffer = torch::cat(flat);
    const Mesh& mesh = *by_index[bucket.members[0]]->value().mesh();
    mesh.comm(axes_of[bucket.members[0]]).all_reduce_(buffer);
    ++gradient_all_reduce_count();
    int64_t offset = 0;
    for (size_t m : bucket.members) {
      int64_t n = local[m].numel();
      local[m] = buffer.narrow(0, offset, n).view(local[m].sizes());
      offset += n;
    }
  }
  State grads;
  i = 0;
  for (auto& [path, v] : leaves) {
    // ZeRO: the pending sum over the replica axes, reduce-scattered (in state order everywhere).
    Array g = zero_spec[i] ? redistribute(Array::from_local(local[i], v.shape(),
                                                            {v.value().mesh(), v.value().spec()},
                                                            axes_of[i]),
                                          *zero_spec[i])
                           : v.value().with_local(local[i]);
    grads.add(path, variable_like(v, g));
    ++i;
  }
  return grads;
}

}  // namespace detail
}  // namespace nnx
