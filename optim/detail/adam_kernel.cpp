#include <nnx/optim/detail/adam_kernel.h>

#ifdef NNX_WITH_CUDA
#include <nnx/core/error.h>
#include <nnx/optim/detail/cuda/adam_step.h>
#include <nnx/sharding/world.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/variable.h>
#endif

#include <atomic>
#include <vector>

namespace nnx::optim::detail {

namespace {

std::atomic<int64_t> steps_run{0};

#ifdef NNX_WITH_CUDA
// The scalars as the fused pass rounds them: Adam's, then the decay's, then the scale's.
template <class T> cuda::AdamScalars<T> scalars_of(const AdamKernelPlan& plan) {
  return {static_cast<T>(1 - plan.b1),
          static_cast<T>(plan.b1),
          static_cast<T>(1 - plan.b2),
          static_cast<T>(plan.b2),
          bias_reciprocal<T>(plan.b1, plan.step),
          bias_reciprocal<T>(plan.b2, plan.step),
          static_cast<T>(plan.eps),
          static_cast<T>(plan.weight_decay),
          static_cast<T>(plan.scale)};
}

void enqueue(const std::vector<cuda::AdamBlocks>& blocks, const AdamKernelPlan& plan,
             const at::Tensor& first) {
  const c10::cuda::CUDAGuard guard(first.device());
  void* stream = c10::cuda::getCurrentCUDAStream(first.device().index()).stream();
  const char* error =
      first.scalar_type() == at::kFloat
          ? cuda::enqueue_adam_step(blocks.data(), blocks.size(), scalars_of<float>(plan), stream)
          : cuda::enqueue_adam_step(blocks.data(), blocks.size(), scalars_of<double>(plan), stream);
  if (error != nullptr)
    nnx::detail::throw_error(
        "Optimizer::update",
        fmt::format("the Adam kernel failed to launch on {} (rank {}): {}; rerun with "
                    "CUDA_LAUNCH_BLOCKING=1 to find the operation at fault",
                    first.device().str(), world_rank(), error));
}
#endif

}  // namespace

int64_t adam_kernel_steps() { return steps_run.load(); }

bool adam_kernel_applies(const State& updates, const State& params) {
#ifdef NNX_WITH_CUDA
  if (params.size() == 0 || updates.size() != params.size()) return false;
  const at::Tensor& first = state_entry(params, 0).tensor();
  const auto dtype = first.scalar_type();
  if ((dtype != at::kFloat && dtype != at::kDouble) || !first.is_cuda()) return false;
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = state_entry(params, i).tensor();
    const at::Tensor& g = state_entry(updates, i).tensor();
    if (p.scalar_type() != dtype || g.scalar_type() != dtype || p.device() != first.device() ||
        g.device() != first.device() || !p.is_contiguous() || g.sizes() != p.sizes())
      return false;
  }
  return true;
#else
  return false;
#endif
}

bool run_adam_kernel(FusedStage& stage, State& params, const State& updates) {
#ifdef NNX_WITH_CUDA
  AdamKernelPlan plan;
  if (!stage.add_to(plan) || plan.mu == nullptr || !plan.scaled) return false;
  stage.prepare();
  std::vector<at::Tensor> gradients;  // alive until the launch is enqueued
  std::vector<cuda::AdamBlocks> blocks;
  size_t i = 0;
  for (auto& [path, variable] : params) {
    gradients.push_back(state_entry(updates, i).tensor().contiguous());
    const at::Tensor& p = variable.tensor();
    blocks.push_back({p.data_ptr(), gradients.back().data_ptr(), (*plan.mu)[i].data_ptr(),
                      (*plan.nu)[i].data_ptr(), p.numel(),
                      !plan.decayed.empty() && plan.decayed[i]});
    ++i;
  }
  enqueue(blocks, plan, state_entry(params, 0).tensor());
  // Written in place as an in-place op would be: a graph that saved a parameter sees the change.
  for (auto& [path, variable] : params) torch::autograd::impl::bump_version(variable.tensor());
  stage.finish();  // the moments' versions, the step counters
  ++steps_run;
  return true;
#else
  return false;
#endif
}

}  // namespace nnx::optim::detail
