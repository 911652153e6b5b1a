// On CUDA tensors, Optimizer::update runs every built-in chain as nnx's own kernel
// (optim/detail/step_kernel.h), whose values equal nnx's pass on the CPU (optax's arithmetic)
// bit for bit; chains it cannot take (a transformation of the user's, more stages than a launch
// carries) decline it and take the transformations' tensor ops, equal up to rounding. Checked
// where there is a GPU.
#include "../catch_after_torch.h"

#include <nnx/nnx.h>
#include <nnx/optim/detail/fused_stage.h>
#include <nnx/optim/detail/step_kernel.h>

#include <torch/types.h>
#include <torch/utils.h>

#include "optim_test_models.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <tuple>
#include <string>
#include <vector>

namespace optim = nnx::optim;

namespace {

using nnx_test::Three;

// 37 parameters (more than one launch takes), one of them empty.
struct Many : nnx::Module {
  std::vector<nnx::Param> NNX_FIELD(blocks);
  explicit Many(at::ScalarType dtype, c10::Device device = torch::kCPU) {
    for (int64_t k = 0; k < 37; ++k)
      blocks.emplace_back(
          torch::randn({k == 3 ? 0 : 1 + 97 * k % 1000}, torch::TensorOptions(dtype)).to(device));
  }
};

// One parameter of 24M elements: more chunks than a launch's grid has blocks (132 multiprocessors
// take 8 blocks each of 16384 elements), so that blocks go round the grid-stride loop.
struct Large : nnx::Module {
  nnx::Param NNX_FIELD(kernel);
  explicit Large(at::ScalarType dtype, c10::Device device = torch::kCPU)
      : kernel(torch::randn({3000, 8000}, torch::TensorOptions(dtype)).to(device)) {}
};

// Parameters that are views at odd element offsets into larger tensors: not 16-byte aligned, so
// the kernel loads and stores them an element at a time.
struct Unaligned : nnx::Module {
  std::vector<nnx::Param> NNX_FIELD(blocks);
  explicit Unaligned(at::ScalarType dtype, c10::Device device = torch::kCPU) {
    for (int64_t k = 0; k < 5; ++k) {
      const int64_t offset = 1 + 2 * (k % 2), numel = 4000 + 37 * k;  // odd: unaligned
      blocks.emplace_back(torch::randn({offset + numel}, torch::TensorOptions(dtype))
                              .to(device)
                              .narrow(0, offset, numel));
    }
  }
};

// Aligned parameters whose gradients are views at an odd offset (as a gradient bucket's can be).
struct UnalignedGradients : Unaligned {
  static constexpr bool kUnalignedGradients = true;
  explicit UnalignedGradients(at::ScalarType dtype, c10::Device device = torch::kCPU)
      : Unaligned(dtype, device) {
    for (auto& p : blocks) p = nnx::Param(p.tensor().clone());  // aligned copies
  }
};

// `g` on `device`, at an odd element offset into a larger block where `unaligned`.
at::Tensor gradient_on(const at::Tensor& g, c10::Device device, bool unaligned) {
  if (!unaligned) return g.to(device);
  at::Tensor whole = torch::zeros({g.numel() + 1}, g.options().device(device));
  at::Tensor view = whole.narrow(0, 1, g.numel()).view(g.sizes());
  view.copy_(g);
  return view;
}

// The spacing of b's dtype at 1.
double epsilon_of(const at::Tensor& b) {
  switch (b.scalar_type()) {
    case torch::kFloat: return 1.1920929e-7;
    case torch::kBFloat16: return 0.0078125;
    case torch::kHalf: return 0.0009765625;
    default: return 2.220446049250313e-16;
  }
}

// |a - b| within 16 ulp of |b| and of `before` (the value before the steps: a step's rounding
// is that of the larger operand) plus 16 ulp of `scale` (how far the values moved). Loose in
// bfloat16 (16 ulp is 1/8): the chains it admits are also run bit for bit on integer gradients.
bool close(const at::Tensor& a, const at::Tensor& b, double scale, const at::Tensor& before = {}) {
  const double eps = epsilon_of(b);
  auto magnitude = b.abs().to(torch::kDouble);
  if (before.defined()) magnitude = torch::maximum(magnitude, before.abs().to(torch::kDouble));
  auto bound = 16 * eps * (magnitude + scale);
  return ((a.cpu().to(torch::kDouble) - b.to(torch::kDouble)).abs() <= bound).all().item<bool>();
}

// Trains a model on `device` (through the kernel) and a copy on the CPU (nnx's own pass) on the
// same gradients for five steps; returns how many steps went through the kernel. Through the
// kernel and `bitwise`, the values are equal; otherwise within the bound, which from zero
// parameters (values that are the steps alone) holds each step to 16 ulp. Integer gradients
// (small, so every sum of their squares is exact) instead of random ones where asked.
// bfloat16 and float16 parameters start at 1/64 of the random values, so that the smallest
// steps still move every block at their precision; float16 gradients are 1/16 of the others, so
// that their sums of squares stay inside float16's range (the gradients' norm is taken in the
// gradients' dtype, as optax takes it).
template <class Model = Three>
int64_t compare(const std::function<optim::GradientTransformation()>& make, at::ScalarType dtype,
                c10::Device device, bool bitwise, bool from_zero = false,
                bool integer_gradients = false) {
  torch::manual_seed(5);
  Model a(dtype, device), b(dtype, torch::kCPU);
  const bool reduced = dtype == torch::kBFloat16 || dtype == torch::kHalf;
  const double gradient_scale = dtype == torch::kHalf ? 1.0 / 16 : 1.0;  // integers stay exact
  {
    torch::NoGradGuard no_grad;
    for (const auto& [path, v] : nnx::state(b)) {
      if (from_zero) nnx::state(a).at(path).tensor().zero_();
      if (reduced) nnx::state(a).at(path).tensor().mul_(1.0 / 64);
      v.tensor().copy_(nnx::state(a).at(path).tensor().cpu());
    }
  }
  const Model initial = nnx::clone(b);
  optim::Optimizer on_device(a, make()), reference(b, make());
  const int64_t before = optim::detail::step_kernel_steps();
  std::vector<int64_t> versions;  // each parameter moves its version at least once per step
  for (const auto& [path, v] : nnx::state(a)) versions.push_back(v.tensor()._version());
  for (int step = 0; step < 5; ++step) {
    nnx::State ga, gb;
    for (const auto& [path, p] : nnx::state(b)) {
      auto g = (integer_gradients ? torch::round(torch::randn_like(p.tensor()) * 4)
                                  : torch::randn_like(p.tensor()) * (step + 1)) *
               gradient_scale;
      bool unaligned = false;
      if constexpr (requires { Model::kUnalignedGradients; })
        unaligned = Model::kUnalignedGradients && device.is_cuda();
      ga.add(path, nnx::Param(gradient_on(g, device, unaligned)));
      gb.add(path, nnx::Param(g));
    }
    on_device.update(a, ga);
    reference.update(b, gb);
  }
  const int64_t through_kernel = optim::detail::step_kernel_steps() - before;
  const bool exact = bitwise && through_kernel > 0;
  size_t k = 0;
  for (const auto& [path, v] : nnx::state(a)) {
    const int64_t before_steps = versions[k++];
    if (v.tensor().numel() == 0) continue;  // nothing written
    INFO(path << ": version before " << before_steps << ", after " << v.tensor()._version());
    CHECK(v.tensor()._version() >= before_steps + 5);
  }
  for (const auto& [path, v] : nnx::state(b)) {
    INFO(path);
    const at::Tensor& start = nnx::state(initial).at(path).tensor();
    if (v.tensor().numel() == 0) continue;
    const double moved = (v.tensor() - start).abs().max().template item<double>();
    CHECK(moved > 0);
    if (exact)
      CHECK(torch::equal(nnx::state(a).at(path).tensor().cpu(), v.tensor()));
    else
      CHECK(close(nnx::state(a).at(path).tensor(), v.tensor(), moved, start));
  }
  auto sa = on_device.state(), sb = reference.state();
  REQUIRE(sa.size() == sb.size());
  for (const auto& [path, v] : sb) {
    INFO(path);
    if (v.tensor().numel() == 0) continue;
    if (v.tensor().is_floating_point() && !exact)
      CHECK(close(sa.at(path).tensor(), v.tensor(), v.tensor().abs().max().template item<double>()));
    else
      CHECK(torch::equal(sa.at(path).tensor().cpu(), v.tensor()));  // the step counts
  }
  return through_kernel;
}

struct Case {
  std::string name;
  std::function<optim::GradientTransformation()> make;
  bool built_in;  // every stage is nnx's: through the kernel
  // Through the kernel and equal bit for bit: not where a gradient norm is taken, a sum whose
  // order differs between the CPU and the GPU (the values then differ by its rounding).
  bool bitwise = built_in;
};

// A transformation of the user's (no fused form): halves the updates.
optim::GradientTransformation halve() {
  return {[](const nnx::State&) { return optim::TxState{}; },
          [](nnx::State& updates, optim::TxState&, const nnx::State&) {
            for (auto& [path, u] : updates) u.set_value(u.value().with_local(u.tensor() * 0.5));
          },
          nullptr};
}

// Adam's eps for `dtype`: in float16 at least 1e-4, since a smaller one rounds to zero there
// (or near it) and a gradient whose square underflows then gives an infinite step, in optax too.
double adam_eps(at::ScalarType dtype, double eps = 1e-8) {
  return dtype == torch::kHalf ? std::max(eps, 1e-4) : eps;
}

std::vector<Case> cases(at::ScalarType dtype = torch::kFloat) {
  const double e8 = adam_eps(dtype), e6 = adam_eps(dtype, 1e-6);
  return {
      {"adam", [=] { return optim::adam(1e-2, 0.9, 0.999, e8); }, true},
      {"adamw masked, warmup cosine",
       [=] {
         return optim::adamw(optim::warmup_cosine_decay_schedule(0, 1e-2, 2, 5), 0.9, 0.999, e8,
                             0.1, nnx::PathContains("kernel"));
       },
       true},
      {"adamw, every parameter decayed", [=] { return optim::adamw(3e-3, 0.8, 0.99, e6, 0.05); },
       true},
      {"clip then adam",
       [=] {
         return optim::chain({optim::clip_by_global_norm(1.0), optim::adam(3e-3, 0.9, 0.999, e8)});
       },
       true, false},
      {"clip that never clips, then adamw",
       [=] {
         return optim::chain({optim::clip_by_global_norm(1e9), optim::adamw(3e-3, 0.9, 0.999, e8)});
       },
       true},
      {"adam with eps_root",
       [=] { return optim::chain({optim::scale_by_adam(0.8, 0.99, e6, 1e-7), optim::scale(-0.01)}); },
       true},
      {"sgd", [] { return optim::sgd(0.05); }, true},
      {"sgd momentum", [] { return optim::sgd(0.05, 0.9); }, true},
      {"sgd nesterov, linear schedule",
       [] { return optim::sgd(optim::linear_schedule(0.05, 0.01, 4), 0.9, true); }, true},
      {"lion with weight decay", [] { return optim::lion(1e-3, 0.9, 0.99, 0.1); }, true},
      {"rmsprop", [] { return optim::rmsprop(1e-2, 0.9, 1e-6); }, true},
      {"rmsprop with momentum, clipped",
       [] {
         return optim::chain({optim::clip_by_global_norm(0.5), optim::rmsprop(1e-2, 0.9, 1e-6, 0.9)});
       },
       true, false},
      // Not the kernel's: nnx's own pass on the CPU, the transformations' update on a device.
      {"a transformation of the user's, then adam",
       [=] { return optim::chain({halve(), optim::adam(3e-3, 0.9, 0.999, e8)}); }, false},
      // Clipping counts as a stage whether it clips or not (here it never does), so that the
      // kernel declines the chain on every step, not only where the norm is large.
      {"a clip that never clips and eight stages",
       [] {
         std::vector<optim::GradientTransformation> stages{optim::clip_by_global_norm(1e9)};
         for (int k = 0; k < 7; ++k) stages.push_back(optim::scale(1.5));
         stages.push_back(optim::sgd(0.01));
         return optim::chain(stages);
       },
       false},
      {"nine stages",
       [] {
         std::vector<optim::GradientTransformation> stages(8, optim::scale(1.5));
         stages.push_back(optim::sgd(0.01));
         return optim::chain(stages);
       },
       false},
  };
}

// The dtypes the kernel takes, each against nnx's own pass on the CPU: float16 where that pass
// takes it (CPUs with AVX2 and F16C).
std::vector<at::ScalarType> kernel_dtypes() {
  std::vector<at::ScalarType> dtypes{torch::kFloat, torch::kDouble, torch::kBFloat16};
  if (optim::detail::float16_lanes()) dtypes.push_back(torch::kHalf);
  else WARN("float16 left out: the CPU's fused pass takes it only with AVX2 and F16C");
  return dtypes;
}

// True where there is a CUDA device; else the case says it is skipped.
bool has_gpu() {
  if (nnx::cuda_device_count() > 0) return true;
  WARN("no CUDA device: skipped");
  return false;
}

// x rounded to bfloat16 and to float16 (to nearest, ties to even), widened back.
float as_bfloat16(float x) { return static_cast<float>(c10::BFloat16(x)); }
float as_float16(float x) { return static_cast<float>(c10::Half(x)); }

}  // namespace

TEST_CASE("Chains on CPU tensors take the fused pass, not the CUDA kernel") {
  const int64_t before = optim::detail::step_kernel_steps();
  for (const auto& c : cases()) {
    INFO(c.name);
    torch::manual_seed(5);
    Three model(torch::kFloat, torch::kCPU);
    optim::Optimizer optimizer(model, c.make());
    nnx::State gradients;
    for (const auto& [path, p] : nnx::state(model))
      gradients.add(path, nnx::Param(torch::ones_like(p.tensor())));
    const nnx::State params = nnx::state(model);
    CHECK_FALSE(optim::detail::step_kernel_applies(gradients, params, params,
                                                   std::vector<bool>(params.size(), false)));
    optimizer.update(model, gradients);
  }
  CHECK(optim::detail::step_kernel_steps() == before);
}

// The plan a chain's stages give the kernel, built on the CPU: each stage's kind, scalars (as its
// CPU loop rounds them), slots and mask; clipping there in a plan's shape, and after `prepare`
// only where it clips.
TEST_CASE("A chain's stages give the kernel their operations, scalars, slots and masks") {
  torch::manual_seed(5);
  Three model(torch::kFloat);
  const nnx::State params = nnx::state(model);
  nnx::State gradients;
  for (const auto& [path, p] : params) gradients.add(path, nnx::Param(torch::ones_like(p.tensor())));
  const auto plan_of = [&](optim::GradientTransformation tx, bool shape_only, bool prepared) {
    optim::TxState state = tx.init(params);
    auto stage = tx.fused(state, optim::FusedInputs{gradients, params, true});
    REQUIRE(stage);
    if (prepared) stage->prepare();
    optim::KernelPlan plan;
    plan.shape_only = shape_only;
    REQUIRE(stage->add_to(plan));
    return std::make_tuple(plan, state, stage);  // the plan points into the stage's slots
  };
  using Kind = optim::detail::cuda::StepKind;
  {
    INFO("adamw(1e-2, 0.8, 0.99, 1e-6, 0.1, kernels only): Adam, masked decay, scale");
    auto [plan, state, stage] =
        plan_of(optim::adamw(1e-2, 0.8, 0.99, 1e-6, 0.1, nnx::PathContains("kernel")), false, true);
    REQUIRE(plan.ops.size() == 3);
    CHECK(plan.ops[0].kind == Kind::adam);
    CHECK(plan.ops[0].single[0] == static_cast<float>(1 - 0.8));
    CHECK(plan.ops[0].wide[3] == 0.99);
    CHECK(plan.ops[0].single[4] == optim::detail::bias_reciprocal<float>(0.8, 1));
    CHECK(plan.ops[0].wide[5] == optim::detail::bias_reciprocal<double>(0.99, 1));
    CHECK(plan.ops[0].single[7] == 1e-6f);
    INFO("bfloat16 and float16 blocks: every scalar rounded to them; the bias corrections as "
         "the reduced loops take them (the rounded 1 - b^t, and its rounded reciprocal)");
    CHECK(plan.ops[0].bfloat16[0] == as_bfloat16(static_cast<float>(1 - 0.8)));
    CHECK(plan.ops[0].float16[3] == as_float16(0.99f));
    CHECK(plan.ops[0].bfloat16[7] == as_bfloat16(1e-6f));
    CHECK(plan.ops[0].float16[7] == as_float16(1e-6f));
    for (int k : {4, 5}) {
      const float c = optim::detail::bias_correction<float>(k == 4 ? 0.8 : 0.99, 1);
      CHECK(plan.ops[0].bfloat16[k] == as_bfloat16(c));
      CHECK(plan.ops[0].float16[k] == as_float16(1.0f / as_float16(c)));
    }
    REQUIRE(plan.ops[0].slots.size() == 2);
    CHECK(plan.ops[0].slots[0]->size() == 3);
    CHECK(plan.ops[1].kind == Kind::decay);
    CHECK(plan.ops[1].wide[0] == 0.1);
    CHECK(plan.ops[1].bfloat16[0] == as_bfloat16(0.1f));
    REQUIRE(plan.ops[1].selected != nullptr);
    CHECK(*plan.ops[1].selected == std::vector<bool>{true, false, false});
    CHECK(plan.ops[2].kind == Kind::scale);
    CHECK(plan.ops[2].wide[0] == -1e-2);
    CHECK(plan.ops[2].float16[0] == as_float16(-1e-2f));
  }
  {
    INFO("sgd with Nesterov momentum: a trace with its slot, then the scale");
    auto [plan, state, stage] = plan_of(optim::sgd(0.05, 0.9, true), false, true);
    REQUIRE(plan.ops.size() == 2);
    CHECK(plan.ops[0].kind == Kind::nesterov_trace);
    CHECK(plan.ops[0].single[0] == 0.9f);
    CHECK(plan.ops[0].slots.size() == 1);
    CHECK(plan.ops[1].kind == Kind::scale);
  }
  // The gradients are ones: their norm, sqrt(21,000 + 70 + 30), is between the two maxima.
  const double norm = optim::global_norm(gradients);
  for (double max_norm : {1.0, 1e9}) {
    INFO("clip_by_global_norm(" << max_norm << ") then sgd");
    const auto make = [&] {
      return optim::chain({optim::clip_by_global_norm(max_norm), optim::sgd(0.1)});
    };
    auto [shape, shape_state, shape_stage] = plan_of(make(), true, false);
    REQUIRE(shape.ops.size() == 2);
    CHECK(shape.ops[0].kind == Kind::clip);
    auto [plan, state, stage] = plan_of(make(), false, true);
    if (max_norm < norm) {
      REQUIRE(plan.ops.size() == 2);
      CHECK(plan.ops[0].kind == Kind::clip);
      CHECK(plan.ops[0].wide[0] == norm);
      CHECK(plan.ops[0].single[1] == static_cast<float>(max_norm));
    } else {
      REQUIRE(plan.ops.size() == 1);
      CHECK(plan.ops[0].kind == Kind::scale);
    }
  }
}

TEST_CASE("Built-in chains on CUDA tensors take nnx's kernel, equal to the CPU's pass bit for bit",
          "[gpu]") {
  if (!has_gpu()) return;
  for (auto dtype : kernel_dtypes())
    for (const auto& c : cases(dtype)) {
      INFO(c.name << " in " << c10::toString(dtype));
      const c10::Device cuda(torch::kCUDA, 0);
      const int64_t expected = c.built_in ? 5 : 0;
      CHECK(compare(c.make, dtype, cuda, c.bitwise) == expected);
      INFO("from zero parameters");
      CHECK(compare(c.make, dtype, cuda, c.bitwise, true) == expected);
      INFO("37 parameters: two launches");
      CHECK(compare<Many>(c.make, dtype, cuda, c.bitwise) == expected);
      INFO("integer gradients: their norm is exact on either device, so every step is");
      CHECK(compare<Many>(c.make, dtype, cuda, c.built_in, false, true) == expected);
    }
}

TEST_CASE("The CUDA kernel's blocks go round their grid on a large parameter, bit for bit", "[gpu]") {
  if (!has_gpu()) return;
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    INFO(c10::toString(dtype));
    CHECK(compare<Large>([] { return optim::adamw(1e-3); }, dtype, c10::Device(torch::kCUDA, 0),
                         true) == 5);
  }
}

TEST_CASE("Parameters or gradients at unaligned addresses take the kernel lane by lane, bit for bit",
          "[gpu]") {
  if (!has_gpu()) return;
  const c10::Device cuda(torch::kCUDA, 0);
  for (auto dtype : kernel_dtypes()) {
    INFO(c10::toString(dtype));
    Unaligned probe(dtype, cuda);
    for (const auto& p : probe.blocks)
      REQUIRE(reinterpret_cast<uintptr_t>(p.tensor().data_ptr()) % 16 != 0);
    const double eps = adam_eps(dtype);
    CHECK(compare<Unaligned>([=] { return optim::adamw(1e-3, 0.9, 0.999, eps); }, dtype, cuda,
                             true) == 5);
    CHECK(compare<Unaligned>([] { return optim::sgd(1e-2, 0.9, true); }, dtype, cuda, true) == 5);
    INFO("aligned parameters, gradients at odd offsets");
    UnalignedGradients aligned(dtype, cuda);
    for (const auto& p : aligned.blocks)
      REQUIRE(reinterpret_cast<uintptr_t>(p.tensor().data_ptr()) % 16 == 0);
    CHECK(compare<UnalignedGradients>([=] { return optim::adamw(1e-3, 0.9, 0.999, eps); }, dtype,
                                      cuda, true) == 5);
  }
}

// Under ZeRO the kernel writes a slice's update to a buffer (gathered and added afterwards)
// instead of adding it: here each parameter's slice is its first half and one element (a part
// lane group at its end), stepped three times through the kernel and through the CPU's pass
// (run_fused with add = false), in every dtype; the slices stay as they were, the slots agree.
TEST_CASE("ZeRO slices: the kernel's update of each slice equals the CPU pass's, bit for bit",
          "[gpu]") {
  if (!has_gpu()) return;
  const c10::Device cuda(torch::kCUDA, 0);
  for (auto dtype : kernel_dtypes()) {
    INFO(c10::toString(dtype));
    torch::manual_seed(11);
    const bool reduced = dtype == torch::kBFloat16 || dtype == torch::kHalf;
    Three model(dtype, cuda);
    nnx::State params = nnx::state(model), view_gpu, view_cpu;
    for (const auto& [path, p] : params) {
      if (reduced) p.tensor().mul_(1.0 / 64);
      const at::Tensor slice = p.tensor().flatten().narrow(0, 0, p.tensor().numel() / 2 + 1);
      view_gpu.add(path, nnx::Param(slice.clone()));
      view_cpu.add(path, nnx::Param(slice.cpu()));
    }
    const std::vector<bool> sliced(params.size(), true);
    const double eps = adam_eps(dtype);
    for (const auto& make : std::vector<std::function<optim::GradientTransformation()>>{
             [=] { return optim::adamw(1e-3, 0.9, 0.999, eps, 0.1); },
             [] { return optim::sgd(1e-2, 0.9, true); },
             [] { return optim::lion(1e-3, 0.9, 0.99, 0.1); }}) {
      optim::GradientTransformation tx = make();
      optim::TxState on_gpu = tx.init(view_gpu), on_cpu = tx.init(view_cpu);
      for (int step = 0; step < 3; ++step) {
        INFO("step " << step);
        nnx::State g_gpu, g_cpu;
        for (const auto& [path, v] : view_cpu) {
          const at::Tensor g = torch::randn_like(v.tensor()) * (dtype == torch::kHalf ? 0.0625 : 1);
          g_gpu.add(path, nnx::Param(g.to(cuda)));
          g_cpu.add(path, nnx::Param(g));
        }
        auto gpu_stage = tx.fused(on_gpu, optim::FusedInputs{g_gpu, view_gpu, true});
        std::vector<at::Tensor> zero_updates;
        REQUIRE(optim::detail::run_step_kernel(*gpu_stage, params, g_gpu, view_gpu, sliced,
                                               zero_updates));
        auto cpu_stage = tx.fused(on_cpu, optim::FusedInputs{g_cpu, view_cpu, true});
        cpu_stage->prepare();
        for (size_t i = 0; i < params.size(); ++i) {
          const at::Tensor& slice = optim::state_entry(view_cpu, i).tensor();
          at::Tensor expected = torch::empty_like(slice);
          optim::detail::run_fused(*cpu_stage, i, optim::state_entry(g_cpu, i).tensor(), slice,
                                   expected, false);
          INFO("parameter " << i);
          CHECK(expected.abs().max().item<double>() > 0);
          CHECK(torch::equal(zero_updates[i].cpu(), expected));
          CHECK(torch::equal(optim::state_entry(view_gpu, i).tensor().cpu(), slice));
        }
        cpu_stage->finish();
      }
      const nnx::State slots_gpu = on_gpu.variables(), slots_cpu = on_cpu.variables();
      REQUIRE(slots_gpu.size() == slots_cpu.size());
      for (const auto& [path, v] : slots_cpu) {
        INFO(path);
        CHECK(torch::equal(slots_gpu.at(path).tensor().cpu(), v.tensor()));
      }
    }
  }
}

// The kernel takes one dtype throughout: bfloat16 or float16 parameters with gradients of
// another dtype are not its, nor are slots made for parameters of another dtype (a model cast
// after its optimizer was made); it declines them having changed nothing.
TEST_CASE("The kernel declines mixed dtypes and slots of another dtype, changing nothing", "[gpu]") {
  if (!has_gpu()) return;
  const c10::Device cuda(torch::kCUDA, 0);
  torch::manual_seed(13);
  for (auto [param_dtype, gradient_dtype] :
       std::vector<std::pair<at::ScalarType, at::ScalarType>>{{torch::kBFloat16, torch::kFloat},
                                                              {torch::kHalf, torch::kBFloat16},
                                                              {torch::kFloat, torch::kHalf}}) {
    INFO(c10::toString(param_dtype) << " parameters, " << c10::toString(gradient_dtype)
                                    << " gradients");
    Three model(param_dtype, cuda);
    const nnx::State params = nnx::state(model);
    nnx::State gradients;
    for (const auto& [path, p] : params)
      gradients.add(path, nnx::Param(torch::ones_like(p.tensor()).to(gradient_dtype)));
    CHECK_FALSE(optim::detail::step_kernel_applies(gradients, params, params,
                                                   std::vector<bool>(params.size(), false)));
  }
  for (auto dtype : {torch::kBFloat16, torch::kHalf}) {
    INFO("float32 slots, " << c10::toString(dtype) << " parameters");
    Three made_for(torch::kFloat, cuda);
    optim::GradientTransformation tx = optim::adamw(1e-3);
    optim::TxState state = tx.init(nnx::state(made_for));
    Three model(dtype, cuda);
    nnx::State params = nnx::state(model), gradients;
    std::vector<at::Tensor> before;
    for (const auto& [path, p] : params) {
      gradients.add(path, nnx::Param(torch::ones_like(p.tensor())));
      before.push_back(p.tensor().clone());
    }
    const std::vector<bool> sliced(params.size(), false);
    REQUIRE(optim::detail::step_kernel_applies(gradients, params, params, sliced));
    auto stage = tx.fused(state, optim::FusedInputs{gradients, params, true});
    REQUIRE(stage);
    std::vector<at::Tensor> zero_updates;
    const int64_t steps = optim::detail::step_kernel_steps();
    CHECK_FALSE(optim::detail::run_step_kernel(*stage, params, gradients, params, sliced,
                                               zero_updates));
    CHECK(optim::detail::step_kernel_steps() == steps);
    for (size_t i = 0; i < params.size(); ++i)
      CHECK(torch::equal(optim::state_entry(params, i).tensor(), before[i]));
    for (const auto& [path, v] : state.variables())
      if (v.tensor().is_floating_point()) CHECK(v.tensor().abs().max().item<double>() == 0);
  }
}
