// The optimizer step alone, on one device (NNX_DEVICE, else the GPU of this local rank, else the
// CPU): each built-in chain through nnx's fused step, the same chain through the
// transformations' tensor ops (the path taken without a fused form), and LibTorch's own
// optimizer where it has one, on the parameters of a GPT stack (d_model 1024, 4 blocks: 50M).
// The three alternate step by step. First, global_norm against the same sums of squares in
// LibTorch. Usage: bench_device_optimizers [steps=50] [d_model=1024] [blocks=4]
// [dtype=float32|bfloat16|float16] (the parameters', gradients' and slots' dtype; the global
// norm part stays float32). Prints JSON lines: median ms per call of each and the ratios
// nnx / LibTorch and nnx / tensor ops; for nnx's step also the host's share (until the call
// returns) and the mean of `steps` steps run back to back with one wait at the end, as a
// training loop runs them.
#include <nnx/nnx.h>

#include <torch/cuda.h>
#include <torch/torch.h>

#include <fmt/format.h>

#include "bench_util.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace {

namespace optim = nnx::optim;
using nnx_bench::median;

// The parameters of `blocks` pre-LayerNorm decoder blocks of width d.
std::vector<std::vector<int64_t>> gpt_shapes(int64_t d, int64_t blocks) {
  std::vector<std::vector<int64_t>> shapes;
  for (int64_t b = 0; b < blocks; ++b)
    for (std::vector<int64_t> s : std::vector<std::vector<int64_t>>{
             {d}, {d}, {d, 3 * d}, {3 * d}, {d, d}, {d}, {d}, {d}, {d, 4 * d}, {4 * d}, {4 * d, d}, {d}})
      shapes.push_back(s);
  return shapes;
}

struct Params : nnx::Module {
  std::vector<nnx::Param> NNX_FIELD(blocks);
};

struct Chain {
  std::string name;
  std::function<optim::GradientTransformation()> make;
  // LibTorch's optimizer for the same update, or null where it has none.
  std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)> libtorch;
};

std::vector<Chain> chains() {
  using namespace torch::optim;
  return {
      {"adam", [] { return optim::adam(1e-3); },
       [](auto p) { return std::make_unique<Adam>(p, AdamOptions(1e-3)); }},
      {"adamw", [] { return optim::adamw(1e-3, 0.9, 0.999, 1e-8, 0.01); },
       [](auto p) { return std::make_unique<AdamW>(p, AdamWOptions(1e-3).weight_decay(0.01)); }},
      {"clip+adamw",
       [] { return optim::chain({optim::clip_by_global_norm(1.0), optim::adamw(1e-3)}); },
       nullptr},
      {"sgd_momentum", [] { return optim::sgd(1e-2, 0.9); },
       [](auto p) { return std::make_unique<SGD>(p, SGDOptions(1e-2).momentum(0.9)); }},
      {"sgd_nesterov", [] { return optim::sgd(1e-2, 0.9, true); },
       [](auto p) {
         return std::make_unique<SGD>(p, SGDOptions(1e-2).momentum(0.9).nesterov(true));
       }},
      {"lion", [] { return optim::lion(1e-4); }, nullptr},
      {"rmsprop", [] { return optim::rmsprop(1e-3); },
       [](auto p) { return std::make_unique<RMSprop>(p, RMSpropOptions(1e-3).alpha(0.9)); }},
  };
}

int run(int argc, char** argv) {
  int steps = 50;
  int64_t d = 1024, blocks = 4;
  torch::Dtype dtype = torch::kFloat;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto eq = arg.find('=');
    if (eq == std::string::npos) steps = std::stoi(arg);
    else if (arg.substr(0, eq) == "d_model") d = std::stoll(arg.substr(eq + 1));
    else if (arg.substr(0, eq) == "blocks") blocks = std::stoll(arg.substr(eq + 1));
    else if (arg == "dtype=float32") dtype = torch::kFloat;
    else if (arg == "dtype=bfloat16") dtype = torch::kBFloat16;
    else if (arg == "dtype=float16") dtype = torch::kHalf;
    else NNX_CHECK(false, "'{}' is not an argument; pass [steps] [d_model=N] [blocks=N] "
                          "[dtype=float32|bfloat16|float16]", arg);
  }
  NNX_CHECK(steps >= 1, "steps must be at least 1, got {}", steps);
  NNX_CHECK(nnx::world_size() == 1, "bench_device_optimizers runs on one process");
  auto mesh = nnx::make_mesh({1}, {"data"});
  const torch::Device device = mesh->device();
  const auto on_device = torch::TensorOptions().device(device).dtype(dtype);
  torch::manual_seed(0);
  torch::NoGradGuard no_grad;
  const auto shapes = gpt_shapes(d, blocks);
  int64_t count = 0;
  for (const auto& s : shapes) count += c10::multiply_integers(s);
  // Milliseconds from an idle device until the device is done (or, `host_only`, until `part`
  // returns; the device is waited for afterwards either way).
  const auto timed = [&](const std::function<void()>& part, bool host_only = false) {
    if (device.is_cuda()) torch::cuda::synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    part();
    auto t1 = std::chrono::steady_clock::now();
    if (device.is_cuda()) torch::cuda::synchronize();
    if (!host_only) t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::milli>(t1 - t0).count();
  };
  {  // The global norm clipping takes: nnx's against the same sums of squares in LibTorch.
    nnx::State gradients;
    std::vector<torch::Tensor> plain;
    for (size_t k = 0; k < shapes.size(); ++k) {
      plain.push_back(torch::randn(shapes[k], device));
      gradients.add(fmt::format("blocks.{}", k), nnx::Param(plain.back()));
    }
    std::vector<double> nnx_ms, torch_ms;
    double nnx_norm = 0, torch_norm = 0;
    for (int i = -3; i < steps; ++i) {
      const double a = timed([&] { nnx_norm = optim::global_norm(gradients); });
      const double b = timed([&] {
        std::vector<torch::Tensor> sums;
        for (const auto& g : plain) sums.push_back((g * g).sum().reshape({1}));
        torch_norm = std::sqrt(torch::cat(sums).to(torch::kDouble).sum().item<double>());
      });
      if (i < 0) continue;
      nnx_ms.push_back(a);
      torch_ms.push_back(b);
    }
    fmt::print("{{\"bench\": \"device_optimizers\", \"part\": \"global_norm\", \"device\": "
               "\"{}\", \"dtype\": \"float32\", \"parameters\": {}, \"nnx_ms\": {:.3f}, \"libtorch_ms\": {:.3f}, "
               "\"nnx/libtorch\": {:.3f}, \"relative_difference\": {:.2e}}}\n",
               device.str(), count, median(nnx_ms), median(torch_ms),
               median(nnx_ms) / median(torch_ms), std::abs(nnx_norm - torch_norm) / torch_norm);
  }
  for (const Chain& chain : chains()) {
    // Three copies of the same parameters and gradients: nnx fused, nnx by tensor ops, LibTorch.
    Params fused, unfused;
    std::vector<torch::Tensor> plain;
    nnx::State gradients;
    for (size_t k = 0; k < shapes.size(); ++k) {
      auto p = torch::randn(shapes[k], on_device) * 0.02;
      fused.blocks.emplace_back(p.clone());
      unfused.blocks.emplace_back(p.clone());
      plain.push_back(p.clone());
      auto g = torch::randn(shapes[k], on_device) * 1e-3;
      plain.back().mutable_grad() = g.clone();
      gradients.add(fmt::format("blocks.{}", k), nnx::Param(g));
    }
    optim::Optimizer with_kernel(fused, chain.make());
    optim::GradientTransformation by_ops = chain.make();
    by_ops.fused = nullptr;
    optim::Optimizer with_ops(unfused, by_ops);
    auto libtorch = chain.libtorch ? chain.libtorch(plain) : nullptr;
    std::vector<double> nnx_ms, ops_ms, torch_ms, host_ms;
    for (int i = -3; i < steps; ++i) {  // 3 warm-up steps each, alternating
      const double h = timed([&] { with_kernel.update(fused, gradients); }, /*host_only=*/true);
      const double a = timed([&] { with_kernel.update(fused, gradients); });
      const double b = timed([&] { with_ops.update(unfused, gradients); });
      const double c = libtorch ? timed([&] { libtorch->step(); }) : 0;
      if (i < 0) continue;
      nnx_ms.push_back(a);
      ops_ms.push_back(b);
      torch_ms.push_back(c);
      host_ms.push_back(h);
    }
    const double back_to_back_ms = timed([&] {
      for (int i = 0; i < steps; ++i) with_kernel.update(fused, gradients);
    }) / steps;
    // Bytes one step must move: parameter, gradient and slots read; parameter and slots written.
    double slot_elements = 0;
    for (const auto& [path, v] : with_kernel.state()) slot_elements += v.tensor().numel();
    const double bytes_moved = static_cast<double>(c10::elementSize(dtype)) *
                               (3 * static_cast<double>(count) + 2 * slot_elements);
    fmt::print("{{\"bench\": \"device_optimizers\", \"chain\": \"{}\", \"device\": \"{}\", "
               "\"dtype\": \"{}\", "
               "\"parameters\": {}, \"steps\": {}, \"nnx_ms\": {:.3f}, \"nnx_host_ms\": {:.3f}, "
               "\"nnx_back_to_back_ms\": {:.3f}, \"tensor_ops_ms\": {:.3f}, "
               "\"libtorch_ms\": {}, \"nnx/tensor_ops\": {:.3f}, \"nnx/libtorch\": {}, "
               "\"nnx_GB/s\": {:.1f}}}\n",
               chain.name, device.str(), nnx::dtype_name(dtype), count, steps, median(nnx_ms),
               median(host_ms),
               back_to_back_ms, median(ops_ms),
               libtorch ? fmt::format("{:.3f}", median(torch_ms)) : "null",
               median(nnx_ms) / median(ops_ms),
               libtorch ? fmt::format("{:.3f}", median(nnx_ms) / median(torch_ms)) : "null",
               bytes_moved / median(nnx_ms) / 1e6);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return nnx_bench::main_of("bench_device_optimizers", run, argc, argv); }
