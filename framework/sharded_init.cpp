// Computing each process's blocks of lazily initialized variables.
#include <nnx/core/error.h>
#include <nnx/core/random.h>
#include <nnx/framework/graph.h>
#include <nnx/sharding/redistribute.h>
#include <nnx/framework/sharded_init.h>
#include <nnx/framework/state_sharding.h>
#include <nnx/sharding/spec_check.h>

namespace nnx {

namespace {

// init.block(box), its errors (an initializer refusing the shape) naming the array.
at::Tensor run_initializer(const LazyArray& init, const Box& box, const std::string& what) {
  try {
    return init.block(box);
  } catch (const Error& e) {
    throw Error(fmt::format("initializing {}: {}", what, e.what()));
  } catch (const c10::Error& e) {  // LibTorch's, from an initializer's tensor ops
    throw Error(fmt::format("initializing {}: {}", what, e.what_without_backtrace()));
  }
}

// This process's block of `init` laid out by `spec` on `mesh` (the whole array without a mesh).
Array compute_block(const LazyArray& init, const std::shared_ptr<const Mesh>& mesh,
                    const PartitionSpec& spec, const std::string& what) {
  NNX_CHECK(init.block, "{} has no block generator", what);
  if (!mesh) {
    at::Tensor full = run_initializer(init, Box::whole(init.shape), what);
    NNX_CHECK(full.sizes().vec() == init.shape, "the initializer of {} returned shape {} for {}",
              what, to_string(full.sizes().vec()), to_string(init.shape));
    return Array(full.to(init.dtype));
  }
  Box box = block_of(init.shape, spec, *mesh, mesh->coordinates());
  // On an accelerator the block is sampled there (bitwise the host's values); initializers
  // that ignore the sampling device are moved after.
  std::optional<at::Device> device;
  if (!mesh->device().is_cpu()) device = mesh->device();
  random::SamplingDeviceScope sampling(device);
  at::Tensor local = run_initializer(init, box, what);
  NNX_CHECK(local.sizes().vec() == box.size,
            "the initializer of {} returned shape {} for its block {}", what,
            to_string(local.sizes().vec()), to_string(box.size));
  return Array::from_local(local.to(mesh->device(), init.dtype), init.shape, {mesh, spec});
}

}  // namespace

Array materialize_on(const LazyArray& init, const std::shared_ptr<const Mesh>& mesh,
                     const std::string& what) {
  if (!mesh) return compute_block(init, mesh, {}, what);
  return compute_block(init, mesh, checked_partition_spec(init.metadata, init.shape, *mesh, what),
                       what);
}

void materialize(State& state, const std::shared_ptr<const Mesh>& mesh) {
  // Check every variable before computing any, so a bad spec changes nothing.
  std::vector<PartitionSpec> specs;
  for (auto& [path, v] : state) {
    const Array& value = v.value();
    NNX_CHECK(!value.is_abstract() || value.initializer(),
              "'{}' is abstract and has no initializer (it came from an abstract value, not "
              "from eval_shape of a constructor); restore it from a checkpoint or update it",
              path);
    NNX_CHECK(!mesh || !value.mesh() || *value.mesh() == *mesh,
              "'{}' is already placed on {}, not on {}; materialize onto the mesh it is on, or "
              "build it under that mesh",
              path, value.mesh()->to_string(), mesh->to_string());
    specs.push_back(mesh ? checked_partition_spec(v.metadata(), v.shape(), *mesh,
                                                  fmt::format("'{}'", path))
                         : PartitionSpec());
  }
  size_t i = 0;
  for (auto& [path, v] : state) {
    const auto& spec = specs[i++];
    const Array& value = v.value();
    if (value.is_abstract()) {
      v.set_value(compute_block(*value.initializer(), mesh, spec, fmt::format("'{}'", path)));
    } else if (!mesh && value.mesh()) {
      // No mesh: whole arrays, these too (a gather over their mesh).
      RedistributeLabel label(path + " (materialize)");
      v.set_value(Array(gather(value)));
    } else if (mesh && !value.mesh()) {
      v.set_value(device_put(value.local(), {mesh, spec}));
    } else if (mesh && (value.spec() != pad_spec(spec, value.shape().size()) ||
                        !value.partial_axes().empty())) {
      // Already placed (before eval_shape, or by hand) in another layout: moved to the spec.
      RedistributeLabel label(path + " (materialize)");
      v.set_value(redistribute(value, spec));
    }
  }
}

void materialize(Module& model, const std::shared_ptr<const Mesh>& mesh) {
  State all = state(model);
  materialize(all, mesh);
}

}  // namespace nnx
