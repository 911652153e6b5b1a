#include <nnx/optim/detail/step_kernel.h>

#ifdef NNX_WITH_CUDA
#include <nnx/core/error.h>
#include <nnx/sharding/world.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/variable.h>
#endif

#include <atomic>
#include <string>
#include <vector>

namespace nnx::optim::detail {

namespace {

std::atomic<int64_t> steps_run{0};

#ifdef NNX_WITH_CUDA
// How blocks of `dtype` are stored for the kernel.
cuda::Storage storage_of(at::ScalarType dtype) {
  if (dtype == at::kBFloat16) return cuda::Storage::bfloat16;
  if (dtype == at::kHalf) return cuda::Storage::float16;
  return cuda::Storage::computed;
}

// The plan as the kernel's program in T on blocks stored as `storage`, each operation's first
// slot numbered in chain order; false where it has more operations or slots than a launch carries.
template <class T>
bool program_of(const KernelPlan& plan, cuda::Storage storage, cuda::StepProgram<T>& program) {
  if (plan.ops.size() > static_cast<size_t>(cuda::kMaxStages)) return false;
  int32_t slots = 0;
  program.count = static_cast<int32_t>(plan.ops.size());
  for (size_t k = 0; k < plan.ops.size(); ++k) {
    const KernelOp& op = plan.ops[k];
    auto& to = program.ops[k];
    to.kind = op.kind;
    to.slot = slots;
    const auto& scalars = [&]() -> const std::array<T, 8>& {
      if constexpr (std::is_same_v<T, float>) {
        if (storage == cuda::Storage::bfloat16) return op.bfloat16;
        if (storage == cuda::Storage::float16) return op.float16;
        return op.single;
      } else {
        return op.wide;
      }
    }();
    std::copy(scalars.begin(), scalars.end(), to.s);
    slots += static_cast<int32_t>(op.slots.size());
  }
  return slots <= cuda::kMaxSlots;
}

// Parameter i's blocks: its own (or its slice's), its gradient's and its slots', the
// operations it skips, and where its result goes (`out`: the parameter, or the slice's update).
cuda::StepBlocks blocks_of(const KernelPlan& plan, size_t i, const at::Tensor& param,
                           const at::Tensor& gradient, const at::Tensor& out) {
  cuda::StepBlocks b{param.data_ptr(), gradient.data_ptr(), {}, param.numel(), 0, out.data_ptr()};
  int slot = 0;
  for (size_t k = 0; k < plan.ops.size(); ++k) {
    const KernelOp& op = plan.ops[k];
    for (const auto* tensors : op.slots) b.slots[slot++] = (*tensors)[i].data_ptr();
    if (op.selected != nullptr && !(*op.selected)[i]) b.skipped |= 1u << k;
  }
  return b;
}

// Throws the CUDA runtime's `error` on `device`, after what it means for the step.
[[noreturn]] void fail(const c10::Device& device, const std::string& meaning, const char* error) {
  nnx::detail::throw_error(
      "Optimizer::update",
      fmt::format("{} on {} (rank {}): {}; rerun with CUDA_LAUNCH_BLOCKING=1 to find the "
                  "operation at fault",
                  meaning, device.str(), world_rank(), error));
}

template <class T>
void enqueue(const std::vector<cuda::StepBlocks>& blocks, const cuda::StepProgram<T>& program,
             cuda::Storage storage, const at::Tensor& first) {
  const c10::cuda::CUDAGuard guard(first.device());
  if (const char* pending = cuda::pending_error())
    fail(first.device(), "nothing was updated: the CUDA runtime holds an error from earlier work",
         pending);
  void* stream = c10::cuda::getCurrentCUDAStream(first.device().index()).stream();
  if (const char* error = cuda::enqueue_fused_step(blocks.data(), blocks.size(), program,
                                                   storage, stream))
    fail(first.device(),
         "the optimizer's step kernel failed to launch (the parameters of launches before it, 32 "
         "each, may have taken this step)",
         error);
}

template <class T>
bool launch_step(FusedStage& stage, State& params, const State& updates, const State& view,
                 const std::vector<bool>& sliced, std::vector<at::Tensor>& zero_updates) {
  // Whether the kernel takes the chain is settled before `prepare` runs any collective; the
  // plan after it holds the same operations or fewer (no clipping where the norm is small).
  KernelPlan shape;
  shape.shape_only = true;
  const cuda::Storage storage = storage_of(state_entry(params, 0).tensor().scalar_type());
  cuda::StepProgram<T> program{};
  // Slots not laid out as the parameters (a model moved devices under its optimizer) take the
  // transformations' update, which says what is wrong.
  if (!stage.fits(view) || !stage.add_to(shape) || !program_of(shape, storage, program))
    return false;
  stage.prepare();
  KernelPlan plan;
  program = {};
  NNX_CHECK(stage.add_to(plan) && program_of(plan, storage, program),
            "internal: the optimizer's step kernel took a chain's shape but not its plan");
  std::vector<at::Tensor> held;  // gradients and slices, alive until the launch is enqueued
  held.reserve(2 * params.size());  // no reallocation: references into it stay valid
  std::vector<cuda::StepBlocks> blocks;
  zero_updates.assign(params.size(), at::Tensor());
  size_t i = 0;
  for (auto& [path, variable] : params) {
    const at::Tensor& gradient = held.emplace_back(state_entry(updates, i).tensor().contiguous());
    if (sliced[i]) {
      const at::Tensor& slice = held.emplace_back(state_entry(view, i).tensor().contiguous());
      zero_updates[i] = at::empty_like(gradient);
      blocks.push_back(blocks_of(plan, i, slice, gradient, zero_updates[i]));
    } else {
      blocks.push_back(blocks_of(plan, i, variable.tensor(), gradient, variable.tensor()));
    }
    ++i;
  }
  enqueue(blocks, program, storage, state_entry(params, 0).tensor());
  // Written in place as an in-place op would be: a graph that saved a parameter sees the change.
  i = 0;
  for (auto& [path, variable] : params)
    if (!sliced[i++]) torch::autograd::impl::bump_version(variable.tensor());
  stage.finish();  // the slots' versions, the step counters
  ++steps_run;
  return true;
}
#endif

}  // namespace

int64_t step_kernel_steps() { return steps_run.load(); }

bool step_kernel_applies(const State& updates, const State& params, const State& view,
                         const std::vector<bool>& sliced) {
#ifdef NNX_WITH_CUDA
  if (params.size() == 0 || updates.size() != params.size() || view.size() != params.size() ||
      sliced.size() != params.size())
    return false;
  const at::Tensor& first = state_entry(params, 0).tensor();
  const auto dtype = first.scalar_type();
  if ((dtype != at::kFloat && dtype != at::kDouble && dtype != at::kBFloat16 &&
       dtype != at::kHalf) ||
      !first.is_cuda())
    return false;
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = state_entry(params, i).tensor();
    const at::Tensor& seen = state_entry(view, i).tensor();
    const at::Tensor& g = state_entry(updates, i).tensor();
    for (const at::Tensor* t : {&p, &seen, &g})
      if (t->scalar_type() != dtype || t->device() != first.device()) return false;
    if (!p.is_contiguous() || g.sizes() != seen.sizes() || (!sliced[i] && !seen.is_same(p)))
      return false;
  }
  return true;
#else
  return false;
#endif
}

bool run_step_kernel(FusedStage& stage, State& params, const State& updates, const State& view,
                     const std::vector<bool>& sliced, std::vector<at::Tensor>& zero_updates) {
#ifdef NNX_WITH_CUDA
  // bfloat16 and float16 blocks are computed in float.
  return state_entry(params, 0).tensor().scalar_type() == at::kDouble
             ? launch_step<double>(stage, params, updates, view, sliced, zero_updates)
             : launch_step<float>(stage, params, updates, view, sliced, zero_updates);
#else
  return false;
#endif
}

}  // namespace nnx::optim::detail
