// Helpers for multi-rank sharding tests: meshes per world size, every spec of a 2-d array on a
// 2-d mesh, and the cotangent seeding / gradient reading of design.md §4.
#pragma once

#include <nnx/nnx.h>

#include <torch/types.h>

#include <memory>
#include <vector>

namespace nnx_test {

// The 2-d meshes tests run on for this world size.
inline std::vector<std::vector<int64_t>> meshes_2d(int world) {
  if (world == 8) return {{2, 4}, {4, 2}};
  if (world == 4) return {{2, 2}};
  if (world == 2) return {{1, 2}, {2, 1}};
  return {{1, 1}};
}

// Every spec of a 2-d array over axes a and b (none, one axis, or both in either order).
inline std::vector<nnx::PartitionSpec> all_specs_2d() {
  using E = nnx::SpecEntry;
  std::vector<E> options{E(), E("a"), E("b"), E{"a", "b"}, E{"b", "a"}};
  std::vector<nnx::PartitionSpec> out;
  for (const auto& e0 : options)
    for (const auto& e1 : options) {
      bool clash = false;
      for (const auto& n : e0.names())
        for (const auto& m : e1.names()) clash |= n == m;
      if (!clash) out.push_back(nnx::P(e0, e1));
    }
  return out;
}

// The slice of a whole tensor that this process's block of `like` covers.
inline at::Tensor block_of(const at::Tensor& full, const nnx::Array& like) {
  auto box = like.local_box();
  at::Tensor t = full;
  for (size_t d = 0; d < box.size.size(); ++d) t = t.narrow(d, box.start[d], box.size[d]);
  return t;
}

// The local cotangent of an output with the dual placement: its block of the global cotangent
// g, kept on coordinate 0 of each axis it is replicated on (pieces that sum to g), on the
// output's device.
inline at::Tensor seed_cotangent(const at::Tensor& g, const nnx::Array& out) {
  at::Tensor local = block_of(g, out).to(out.local().device());
  auto placements = out.placements();
  for (size_t a = 0; a < placements.size(); ++a)
    if (placements[a].is_replicate() && out.mesh()->coordinates()[a] != 0) local = local * 0;
  return local;
}

// The exact gradient block of an input from its local gradient, by the framework's own
// reduction (a replicated input's local gradient is a partial sum over its replica axes).
inline at::Tensor exact_gradient(const at::Tensor& local_grad, const nnx::Array& in) {
  return nnx::reduce_gradient(in, local_grad).local();
}

// Sets the full collective check for a scope and restores the previous mode after it.
class CheckingMode {
 public:
  explicit CheckingMode(bool on) : before_(nnx::Communicator::checking()) {
    nnx::Communicator::set_checking(on);
  }
  ~CheckingMode() { nnx::Communicator::set_checking(before_); }
  CheckingMode(const CheckingMode&) = delete;
  CheckingMode& operator=(const CheckingMode&) = delete;

 private:
  bool before_;
};

// Meshes made while this lives take `device`; the previous default comes back after, even when
// a check throws.
class DefaultDeviceScope {
 public:
  explicit DefaultDeviceScope(c10::Device device) : before_(nnx::default_device()) {
    nnx::set_default_device(device);
  }
  ~DefaultDeviceScope() { nnx::set_default_device(before_); }
  DefaultDeviceScope(const DefaultDeviceScope&) = delete;
  DefaultDeviceScope& operator=(const DefaultDeviceScope&) = delete;

 private:
  c10::Device before_;
};

}  // namespace nnx_test
