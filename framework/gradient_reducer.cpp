// Bucketed gradient reduction overlapped with backward: all-reduces for replicated parameters,
// reduce-scatters (plus an all-reduce over any further replica axes) for ZeRO parameters.
#include <nnx/core/error.h>
#include <nnx/framework/gradient_reducer.h>
#include <nnx/framework/optimizer_spec.h>
#include <nnx/sharding/collective_origin.h>
#include <nnx/sharding/comm_buffer.h>
#include <nnx/sharding/gradient.h>
#include <nnx/sharding/redistribute.h>
#include <nnx/sharding/spec_check.h>
#include <nnx/sharding/world.h>

#include <torch/types.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace nnx {

GradientReductionCounts& gradient_reduction_counts() {
  thread_local GradientReductionCounts counts;
  return counts;
}

namespace detail {

namespace {

// Dense, with the strides the parameter's own gradient buffer would have.
bool laid_out_as(const at::Tensor& grad, const at::Tensor& param) {
  if (!grad.is_non_overlapping_and_dense()) return false;
  if (grad.sizes() != param.sizes() || !param.is_non_overlapping_and_dense())
    return grad.is_contiguous();
  return grad.strides() == param.strides();
}

}  // namespace

struct GradientReducer::Impl {
  struct Leaf {
    std::string path;
    Variable* variable = nullptr;
    at::Tensor tensor;               // the autograd leaf
    at::Tensor grad;                 // its total local gradient, once known
    Axes replicas;                   // replica axes: where the gradient is partial
    std::optional<PartitionSpec> zero_spec;
    int64_t zero_dim = -1;           // ZeRO in a bucket: the dim the one added axis splits
    int bucket = -1;
    unsigned hook = 0;
  };
  struct Bucket {
    std::vector<size_t> members;  // leaf indices
    int64_t bytes = 0;
    bool zero = false;
    const Communicator* comm = nullptr;  // all-reduce axes, or the ZeRO axis
    const Communicator* rest = nullptr;  // ZeRO: the further replica axes, if any
    size_t waiting = 0;                  // gradients not yet known
    bool started = false;
    at::Tensor buffer, out;
    PendingCollective op;
  };

  std::vector<Leaf> leaves;
  std::vector<Bucket> buckets;
  size_t next_start = 0;
  bool armed = false;
  bool overlap = true;
  // The counts of the thread that runs value_and_grad: hooks of CUDA tensors run on autograd's
  // device thread.
  GradientReductionCounts* counts = &gradient_reduction_counts();
  bool finished = false;

  // A ZeRO parameter fits a bucket when its layout adds one axis, as the minor axis of one dim.
  static int64_t single_added_dim(const PartitionSpec& own, const PartitionSpec& zero) {
    int64_t dim = -1;
    for (size_t d = 0; d < own.size(); ++d) {
      const Axes a = own[d].names(), z = zero[d].names();
      if (a == z) continue;
      if (dim >= 0 || z.size() != a.size() + 1 || !std::equal(a.begin(), a.end(), z.begin()))
        return -1;
      dim = static_cast<int64_t>(d);
    }
    return dim;
  }

  void plan(State& state, int64_t cap) {
    for (auto& [path, v] : state) {
      Leaf leaf;
      leaf.path = path;
      leaf.variable = &v;
      leaf.tensor = v.tensor();
      leaf.replicas = replica_axes(v.value());
      leaf.zero_spec = optimizer_spec(path, v);
      if (leaf.zero_spec) {
        leaf.zero_dim = single_added_dim(pad_spec(v.value().spec(), v.shape().size()),
                                         *leaf.zero_spec);
      }
      leaves.push_back(std::move(leaf));
    }
    std::map<std::string, size_t> open;  // bucket key -> its open bucket
    for (size_t i = leaves.size(); i-- > 0;) {
      Leaf& leaf = leaves[i];
      if (leaf.replicas.empty() || (leaf.zero_spec && leaf.zero_dim < 0)) continue;
      const Mesh& mesh = *leaf.variable->value().mesh();
      Axes axes = leaf.replicas, rest;
      if (leaf.zero_spec) {
        axes = {leaf.zero_spec->entries()[leaf.zero_dim].names().back()};
        for (const auto& a : leaf.replicas)
          if (a != axes[0]) rest.push_back(a);
      }
      std::string key =
          fmt::format("{}|{}|{}|{}|{}", static_cast<const void*>(&mesh), fmt::join(axes, ","),
                      fmt::join(rest, ","), leaf.zero_spec.has_value(), dtype_name(leaf.variable->dtype()));
      int64_t bytes = leaf.tensor.numel() * static_cast<int64_t>(leaf.tensor.element_size());
      auto it = open.find(key);
      if (it == open.end() || buckets[it->second].bytes + bytes > cap) {
        Bucket b;
        b.zero = leaf.zero_spec.has_value();
        // Gradient communicators are made here, in bucket order: the same on every rank.
        b.comm = &mesh.gradient_comm(axes);
        if (!rest.empty()) b.rest = &mesh.gradient_comm(rest);
        buckets.push_back(std::move(b));
        it = open.insert_or_assign(key, buckets.size() - 1).first;
      }
      Bucket& b = buckets[it->second];
      b.members.push_back(i);
      b.bytes += bytes;
      ++b.waiting;
      leaf.bucket = static_cast<int>(it->second);
    }
  }

  void start(Bucket& b, bool in_backward) {
    GradientReductionCounts& counts = *this->counts;
    // Started from a hook or after backward, by rank: one origin for the collective check.
    CollectiveOrigin origin("the gradient buckets of value_and_grad");
    if (!b.zero) {
      std::vector<at::Tensor> flat;
      int64_t total = 0;
      for (size_t m : b.members) {
        flat.push_back(leaves[m].grad.reshape(-1));
        total += flat.back().numel();
      }
      b.buffer = comm_buffer({total}, flat.front().options());
      at::cat_out(b.buffer, flat);
      if (detail::reduced_in_float(b.buffer.scalar_type())) b.buffer = b.buffer.to(at::kFloat);
      b.op = b.comm->all_reduce_async_(b.buffer);
      ++counts.all_reduce_buckets;
    } else {
      // Row j: every member's piece that member j of the ZeRO axis keeps, flattened.
      const int64_t parts = b.comm->size();
      std::vector<std::vector<at::Tensor>> rows(parts);
      for (size_t m : b.members) {
        auto pieces = leaves[m].grad.chunk(parts, leaves[m].zero_dim);
        for (int64_t j = 0; j < parts; ++j) rows[j].push_back(pieces[j].reshape(-1));
      }
      int64_t row = 0;
      for (const auto& piece : rows[0]) row += piece.numel();
      b.buffer = comm_buffer({parts, row}, rows[0].front().options());
      for (int64_t j = 0; j < parts; ++j) {
        at::Tensor row_j = b.buffer[j];
        at::cat_out(row_j, rows[j]);
      }
      if (detail::reduced_in_float(b.buffer.scalar_type())) b.buffer = b.buffer.to(at::kFloat);
      b.out = comm_buffer({b.buffer.size(1)}, b.buffer.options());
      b.op = b.comm->reduce_scatter_async(b.buffer, b.out);
      ++counts.reduce_scatter_buckets;
    }
    b.started = true;
    if (in_backward) ++counts.started_in_backward;
  }

  // Starts, in bucket order, every bucket whose gradients are all known; lets MPI progress.
  void start_ready(bool in_backward) {
    while (next_start < buckets.size() && buckets[next_start].waiting == 0)
      start(buckets[next_start++], in_backward);
    for (size_t b = 0; b < next_start; ++b) buckets[b].op.test();
  }

  void on_gradient(size_t i, const at::Tensor& incoming) {
    if (!armed) return;
    Leaf& leaf = leaves[i];
    if (leaf.grad.defined()) return;  // one hook call per backward; ignore a repeat
    at::Tensor earlier = leaf.tensor.grad();  // micro-batches before this one
    leaf.grad = earlier.defined() ? earlier.detach() + incoming.detach() : incoming.detach();
    if (leaf.bucket < 0) return;
    --buckets[leaf.bucket].waiting;
    if (overlap) start_ready(true);
  }
};

namespace {
thread_local int live_reducers = 0;  // on this thread
}  // namespace

bool gradient_in_progress() { return live_reducers > 0; }

GradientReducer::GradientReducer(State& leaves, int64_t bucket_cap_bytes, bool overlap)
    : impl_(std::make_unique<Impl>()) {
  impl_->overlap = overlap;
  try {
    NNX_CHECK(bucket_cap_bytes > 0, "bucket_cap_bytes must be positive, got {}",
              bucket_cap_bytes);
    impl_->plan(leaves, bucket_cap_bytes);
  } catch (...) {  // the leaves go back to plain tensors
    for (auto& [path, v] : leaves) v.set_value(v.value().with_local(v.tensor().detach()));
    throw;
  }
  for (size_t i = 0; i < impl_->leaves.size(); ++i) {
    Impl* impl = impl_.get();
    auto& leaf = impl_->leaves[i];
    leaf.hook = leaf.tensor.register_hook([impl, i](const at::Tensor& g) { impl->on_gradient(i, g); });
  }
  ++live_reducers;
}

// The hooks go with the reducer: a graph kept alive elsewhere never calls into a dead one. A
// reducer left unfinished (the loss function threw) still detaches the leaves.
GradientReducer::~GradientReducer() {
  --live_reducers;
  for (auto& leaf : impl_->leaves) {
    leaf.tensor.remove_hook(leaf.hook);
    if (!impl_->finished)
      leaf.variable->set_value(leaf.variable->value().with_local(leaf.tensor.detach()));
  }
}

void GradientReducer::backward(const Array& loss, bool last) {
  NNX_CHECK(loss.ndim() == 0, "the loss must be a scalar Array, got shape {}",
            to_string(loss.shape()));
  NNX_CHECK(at::isFloatingType(loss.dtype()) || at::isComplexType(loss.dtype()),
            "the loss is {}, which has no gradient; compute it in a floating type (an argmax or "
            "a count is a metric, not a loss)", c10::toString(loss.dtype()));
  if (!loss.mesh()) {
    // Every rank would seed its own loss, and the gradients of placed parameters would be
    // summed over their replicas: the mesh size times the gradient. Refuse.
    for (const auto& leaf : impl_->leaves) {
      const auto& mesh = leaf.variable->value().mesh();
      if (mesh && mesh->size() > 1)
        NNX_FAIL("the loss is on no mesh but '{}' is on {}, so its gradient would count every "
                 "rank's copy of the loss; compute the loss with nnx ops on the model's arrays "
                 "(not from gathered tensors wrapped in a new Array), so that it lies on the mesh",
                 leaf.path, mesh->to_string());
    }
  } else {
    // A parameter on no mesh would get each rank's partial gradient with no reduction: refuse.
    std::vector<std::string> unplaced;
    for (const auto& leaf : impl_->leaves)
      if (!leaf.variable->value().mesh()) unplaced.push_back(leaf.path);
    if (!unplaced.empty()) {
      const size_t shown = std::min<size_t>(unplaced.size(), 5);
      NNX_FAIL("the loss is computed on {} but {} parameter(s) are on no mesh ({}{}), so their "
               "gradients would differ from rank to rank; place the model on the mesh: create it "
               "under nnx::MeshContext on(mesh), or with nnx::eval_shape then "
               "nnx::materialize(model, mesh)",
               loss.mesh()->to_string(), unplaced.size(),
               fmt::join(unplaced.begin(), unplaced.begin() + shown, ", "),
               unplaced.size() > shown ? ", ..." : "");
    }
  }
  impl_->armed = last;
  if (loss.local().requires_grad()) loss.local().backward(loss_cotangent(loss));
  impl_->armed = false;
}

State GradientReducer::finish() {
  Impl& s = *impl_;
  // Gradients no hook delivered: accumulated ones, or zeros for a parameter no loss reached
  // (still reduced, so every rank issues the same collectives before the error below).
  std::vector<std::string> missing;
  for (auto& leaf : s.leaves) {
    if (leaf.grad.defined()) continue;
    at::Tensor g = leaf.tensor.grad();
    if (!g.defined()) {
      missing.push_back(leaf.path);
      g = torch::zeros_like(leaf.tensor);
    }
    leaf.grad = g.detach();
    if (leaf.bucket >= 0) --s.buckets[leaf.bucket].waiting;
  }
  s.start_ready(false);
  NNX_CHECK(s.next_start == s.buckets.size(), "internal: {} of {} buckets never started",
            s.buckets.size() - s.next_start, s.buckets.size());
  for (auto& b : s.buckets) {
    b.op.wait();
    at::Tensor reduced = b.zero ? b.out : b.buffer;
    if (b.rest) b.rest->all_reduce_(reduced);
    int64_t offset = 0;
    for (size_t m : b.members) {
      Impl::Leaf& leaf = s.leaves[m];
      auto sizes = leaf.grad.sizes().vec();
      if (b.zero) sizes[leaf.zero_dim] /= b.comm->size();
      int64_t n = c10::multiply_integers(sizes);
      leaf.grad = reduced.narrow(0, offset, n).view(sizes).to(leaf.grad.scalar_type());
      offset += n;
    }
  }
  // Each unbucketed gradient as PyTorch's .grad holds one: dense, laid out as its parameter, in
  // storage of its own (a + b hands both parameters one tensor, sum(w) an expanded one).
  std::set<const c10::StorageImpl*> storages;
  for (auto& leaf : s.leaves) {
    if (leaf.bucket >= 0) continue;  // a region of its bucket's own buffer
    const bool shared = !storages.insert(leaf.grad.storage().unsafeGetStorageImpl()).second;
    if (shared || !laid_out_as(leaf.grad, leaf.tensor)) {
      at::Tensor copy = leaf.grad.sizes() == leaf.tensor.sizes()
                            ? at::empty_like(leaf.tensor, leaf.grad.options())
                            : at::empty(leaf.grad.sizes(), leaf.grad.options());
      leaf.grad = copy.copy_(leaf.grad);
    }
  }
  for (auto& leaf : s.leaves) leaf.variable->set_value(leaf.variable->value().with_local(leaf.tensor.detach()));
  s.finished = true;

  // Every rank must agree that all gradients exist.
  auto flag = torch::full({1}, static_cast<int64_t>(missing.size()), torch::kLong);
  Communicator::world().all_reduce_(flag, ReduceOp::max);
  NNX_CHECK(flag.item<int64_t>() == 0,
            "no gradient reached {} on rank {} ({} parameter(s) on some rank); every rank must use "
            "every parameter in the loss, or leave it out with the wrt filter",
            missing.empty() ? std::string("any parameter") : fmt::format("{}", fmt::join(missing, ", ")),
            world_rank(), flag.item<int64_t>());

  State grads;
  for (auto& leaf : s.leaves) {
    const Variable& v = *leaf.variable;
    const auto& mesh = v.value().mesh();
    Array g;
    if (!leaf.zero_spec) {
      g = v.value().with_local(leaf.grad);
    } else if (leaf.bucket >= 0) {
      g = Array::from_local(leaf.grad, v.shape(), {mesh, *leaf.zero_spec});
    } else {  // a layout no bucket takes: the pending sum, redistributed on its own
      RedistributeLabel label(leaf.path + " (gradient)");
      g = redistribute(
          Array::from_local(leaf.grad, v.shape(), {mesh, v.value().spec()}, leaf.replicas),
          *leaf.zero_spec);
    }
    grads.add(leaf.path, variable_like(v, g));
  }
  return grads;
}

}  // namespace detail
}  // namespace nnx
