// Checkpoints of GPU arrays: saving stages each block to the host, and a restore reads only
// this rank's block and puts it on the target's device (a GPU mesh's, or a GPU array's own).
#include "checkpoint_test_util.h"
#include "../sharding/sharding_test_util.h"

namespace ckpt = nnx::checkpoint;

namespace {

bool has_gpu() { return nnx::cuda_device_count() > 0; }

nnx::State host_state() {
  nnx::State s;
  s.add("w", nnx::Param(nnx::Array(torch::arange(12, torch::kFloat).reshape({3, 4}) / 7)));
  s.add("step", nnx::Param(nnx::Array(torch::tensor(int64_t{5}))));
  return s;
}

}  // namespace

TEST_CASE("GPU arrays save and restore onto GPU targets with the same values", "[gpu]") {
  if (!has_gpu()) {
    WARN("no CUDA device: skipped");
    return;
  }
  const c10::Device gpu(c10::kCUDA, 0);
  nnx_test::SharedDir dir;
  nnx::State on_gpu;
  for (const auto& [path, v] : host_state())
    on_gpu.add(path, nnx::Param(nnx::Array(v.tensor().to(gpu))));
  ckpt::save(dir.sub("c"), on_gpu);
  // Concrete GPU targets keep their device.
  const nnx::State restored = ckpt::restore(dir.sub("c"), on_gpu);
  for (const auto& [path, v] : restored) {
    INFO(path);
    CHECK(v.value().local().device() == gpu);
    CHECK(torch::equal(v.value().local().cpu(), host_state()[path].tensor()));
  }
  // Abstract targets restored onto a GPU mesh land on the mesh's device.
  auto mesh = [&] {
    nnx_test::DefaultDeviceScope on_gpu(gpu);
    return nnx::make_mesh({1}, {"x"});
  }();
  nnx::State abstract;
  for (const auto& [path, v] : host_state())
    abstract.add(path, nnx::Param(nnx::Array::abstract(v.value().shape(), v.value().dtype())));
  const nnx::State onto_mesh = ckpt::restore(dir.sub("c"), abstract, {.mesh = mesh});
  for (const auto& [path, v] : onto_mesh) {
    INFO(path);
    CHECK(v.value().mesh() == mesh);
    CHECK(v.value().local().device() == gpu);
    CHECK(torch::equal(v.value().local().cpu(), host_state()[path].tensor()));
  }
}
