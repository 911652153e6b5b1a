// Collectives as autograd functions, each with its transpose (design.md §4):
// all_gather <-> reduce_scatter, all_reduce <-> all_reduce, all_to_all <-> its inverse,
// permute <-> the inverse permutation. A group of one is the identity.
#pragma once

#include <nnx/sharding/communicator.h>

#include <ATen/core/Tensor.h>

#include <utility>
#include <vector>

namespace nnx::detail {

at::Tensor all_gather_ad(const at::Tensor& x, const Communicator& comm, int64_t dim);
at::Tensor reduce_scatter_ad(const at::Tensor& x, const Communicator& comm, int64_t dim);
at::Tensor all_reduce_ad(const at::Tensor& x, const Communicator& comm);
at::Tensor all_to_all_ad(const at::Tensor& x, const Communicator& comm, int64_t split_dim,
                         int64_t concat_dim);
at::Tensor permute_ad(const at::Tensor& x, const Communicator& comm,
                      const std::vector<std::pair<int, int>>& pairs);

}  // namespace nnx::detail
