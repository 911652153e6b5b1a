// Autograd functions of the collectives; backward runs the transpose on the same group.
#include <nnx/sharding/detail/differentiable_collectives.h>

#include <torch/csrc/autograd/custom_function.h>
#include <torch/types.h>

namespace nnx::detail {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Communicator comm_of(AutogradContext* ctx) {
  return Communicator::by_id(ctx->saved_data["comm"].toInt());
}

struct AllGather : torch::autograd::Function<AllGather> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm, int64_t dim) {
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["dim"] = dim;
    return Communicator::by_id(comm).all_gather(x, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {comm_of(ctx).reduce_scatter(grads[0], ctx->saved_data["dim"].toInt()), {}, {}};
  }
};

struct ReduceScatter : torch::autograd::Function<ReduceScatter> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm, int64_t dim) {
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["dim"] = dim;
    return Communicator::by_id(comm).reduce_scatter(x, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {comm_of(ctx).all_gather(grads[0], ctx->saved_data["dim"].toInt()), {}, {}};
  }
};

struct AllReduce : torch::autograd::Function<AllReduce> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm) {
    ctx->saved_data["comm"] = comm;
    auto out = x.clone();
    Communicator::by_id(comm).all_reduce_(out);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto g = grads[0].clone();
    comm_of(ctx).all_reduce_(g);
    return {g, {}};
  }
};

struct AllToAll : torch::autograd::Function<AllToAll> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm,
                            int64_t split_dim, int64_t concat_dim) {
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["split"] = split_dim;
    ctx->saved_data["concat"] = concat_dim;
    return Communicator::by_id(comm).all_to_all(x, split_dim, concat_dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {comm_of(ctx).all_to_all(grads[0], ctx->saved_data["concat"].toInt(),
                                    ctx->saved_data["split"].toInt()),
            {}, {}, {}};
  }
};

std::vector<std::pair<int, int>> unflatten(const std::vector<int64_t>& flat, bool inverse) {
  std::vector<std::pair<int, int>> pairs;
  for (size_t i = 0; i + 1 < flat.size(); i += 2) {
    int a = static_cast<int>(flat[i]), b = static_cast<int>(flat[i + 1]);
    pairs.emplace_back(inverse ? b : a, inverse ? a : b);
  }
  return pairs;
}

struct Permute : torch::autograd::Function<Permute> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t comm,
                            std::vector<int64_t> flat_pairs) {
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["pairs"] = flat_pairs;
    return Communicator::by_id(comm).permute(x, unflatten(flat_pairs, false));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto pairs = unflatten(ctx->saved_data["pairs"].toIntVector(), true);
    return {comm_of(ctx).permute(grads[0], pairs), {}, {}};
  }
};

}  // namespace

at::Tensor all_gather_ad(const at::Tensor& x, const Communicator& comm, int64_t dim) {
  if (comm.size() == 1) return x;
  return AllGather::apply(x, comm.id(), dim);
}

at::Tensor reduce_scatter_ad(const at::Tensor& x, const Communicator& comm, int64_t dim) {
  if (comm.size() == 1) return x;
  return ReduceScatter::apply(x, comm.id(), dim);
}

at::Tensor all_reduce_ad(const at::Tensor& x, const Communicator& comm) {
  if (comm.size() == 1) return x;
  return AllReduce::apply(x, comm.id());
}

at::Tensor all_to_all_ad(const at::Tensor& x, const Communicator& comm, int64_t split_dim,
                         int64_t concat_dim) {
  if (comm.size() == 1) return x;
  return AllToAll::apply(x, comm.id(), split_dim, concat_dim);
}

at::Tensor permute_ad(const at::Tensor& x, const Communicator& comm,
                      const std::vector<std::pair<int, int>>& pairs) {
  std::vector<int64_t> flat;
  for (auto [a, b] : pairs) {
    flat.push_back(a);
    flat.push_back(b);
  }
  return Permute::apply(x, comm.id(), flat);
}

}  // namespace nnx::detail
