// shard_map: runs plain LibTorch code on each process's local blocks, with explicit
// collectives over named mesh axes (jax.shard_map). Collectives are differentiable.
//   auto f = nnx::shard_map([](at::Tensor x, at::Tensor w) { return x.matmul(w); }, mesh,
//                           {nnx::P("i", nnx::none), nnx::P()}, nnx::P("i", nnx::none));
//   nnx::Array y = f(x, w);  // Arrays are redistributed to in_specs; tensors are device_put
#pragma once

#include <nnx/sharding/array.h>
#include <nnx/core/random.h>
#include <nnx/sharding/redistribute.h>

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace nnx {

// Collectives inside a shard_map body; `axes` are names of the running mesh's axes.
at::Tensor psum(const at::Tensor& x, const std::vector<std::string>& axes);
at::Tensor psum(const at::Tensor& x, const std::string& axis);
at::Tensor pmean(const at::Tensor& x, const std::string& axis);
at::Tensor pmax(const at::Tensor& x, const std::string& axis);  // not differentiable
// tiled: concatenate along `dim`; else stack a new dim at `dim` (jax.lax.all_gather).
at::Tensor all_gather(const at::Tensor& x, const std::string& axis, int64_t dim = 0,
                      bool tiled = false);
// Sum over the axis, scattered along `dim` (tiled: split the dim; else the dim, of the axis
// size, is removed), as jax.lax.psum_scatter.
at::Tensor psum_scatter(const at::Tensor& x, const std::string& axis, int64_t dim = 0,
                        bool tiled = false);
// perm: (source index, destination index) along the axis; unreached members get zeros.
at::Tensor ppermute(const at::Tensor& x, const std::string& axis,
                    const std::vector<std::pair<int, int>>& perm);
at::Tensor all_to_all(const at::Tensor& x, const std::string& axis, int64_t split_dim,
                      int64_t concat_dim);
int64_t axis_index(const std::string& axis);
int64_t axis_size(const std::string& axis);
// A key different for each index along the axis: fold_in(key, axis_index(axis)).
random::Key fold_in_axis(const random::Key& key, const std::string& axis);

namespace detail {
// The mesh of the shard_map body running on this thread; throws outside one.
const Mesh& current_shard_map_mesh(const char* who);
// RAII: makes `mesh` the running shard_map mesh.
class ShardMapScope {
 public:
  explicit ShardMapScope(const Mesh& mesh);
  ~ShardMapScope();
  ShardMapScope(const ShardMapScope&) = delete;
  ShardMapScope& operator=(const ShardMapScope&) = delete;

 private:
  const Mesh* previous_;
};
Array shard_map_input(const Array& x, const std::shared_ptr<const Mesh>& mesh,
                      const PartitionSpec& spec);
Array shard_map_input(const at::Tensor& x, const std::shared_ptr<const Mesh>& mesh,
                      const PartitionSpec& spec);
// The global Array whose local blocks are `local` laid out by spec (global = local x ways). In
// debug mode (Communicator::checking()) output `index` is checked first: the same shape on every
// process, and equal along the mesh axes its spec leaves out.
Array shard_map_output(const at::Tensor& local, const std::shared_ptr<const Mesh>& mesh,
                       const PartitionSpec& spec, size_t index);
void check_spec_count(size_t given, size_t expected, const char* what);
}  // namespace detail

// The function shard_map returns: call it with Arrays or whole tensors.
template <class Fn> class ShardMapped {
 public:
  ShardMapped(Fn fn, std::shared_ptr<const Mesh> mesh, std::vector<PartitionSpec> in_specs,
              std::vector<PartitionSpec> out_specs)
      : fn_(std::move(fn)), mesh_(std::move(mesh)), in_specs_(std::move(in_specs)),
        out_specs_(std::move(out_specs)) {}

  // One output: an Array; a tuple of tensors: a vector of Arrays.
  template <class... Inputs> auto operator()(const Inputs&... inputs) const {
    detail::check_spec_count(sizeof...(Inputs), in_specs_.size(), "in_specs");
    size_t i = 0;
    std::vector<Array> placed{detail::shard_map_input(inputs, mesh_, in_specs_[i++])...};
    return call(placed, std::index_sequence_for<Inputs...>{});
  }

 private:
  template <size_t... I> auto call(const std::vector<Array>& placed, std::index_sequence<I...>) const {
    detail::ShardMapScope scope(*mesh_);
    auto result = fn_(placed[I].local()...);
    if constexpr (std::is_convertible_v<decltype(result), at::Tensor>) {
      detail::check_spec_count(1, out_specs_.size(), "out_specs");
      return detail::shard_map_output(result, mesh_, out_specs_[0], 0);
    } else {
      constexpr size_t n = std::tuple_size_v<decltype(result)>;
      detail::check_spec_count(n, out_specs_.size(), "out_specs");
      std::vector<Array> outs;
      std::apply([&](const auto&... t) {
        size_t k = 0;
        ((outs.push_back(detail::shard_map_output(t, mesh_, out_specs_[k], k)), ++k), ...);
      }, result);
      return outs;
    }
  }

  Fn fn_;
  std::shared_ptr<const Mesh> mesh_;
  std::vector<PartitionSpec> in_specs_;
  std::vector<PartitionSpec> out_specs_;
};

template <class Fn>
ShardMapped<Fn> shard_map(Fn fn, std::shared_ptr<const Mesh> mesh,
                          std::vector<PartitionSpec> in_specs, PartitionSpec out_spec) {
  return ShardMapped<Fn>(std::move(fn), std::move(mesh), std::move(in_specs), {std::move(out_spec)});
}
template <class Fn>
ShardMapped<Fn> shard_map(Fn fn, std::shared_ptr<const Mesh> mesh,
                          std::vector<PartitionSpec> in_specs,
                          std::vector<PartitionSpec> out_specs) {
  return ShardMapped<Fn>(std::move(fn), std::move(mesh), std::move(in_specs), std::move(out_specs));
}

}  // namespace nnx
