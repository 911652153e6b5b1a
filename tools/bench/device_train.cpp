// The GPU workloads of docs/benchmarks.md, one process on one device (NNX_DEVICE, else the GPU of
// this local rank, else the CPU): nnx against the same model and Adam step written in plain
// LibTorch, the two steps alternating so that both see the same device.
//   dot_relu_dot: the seed-003 guide's DotReluDot, x @ W1 -> relu -> @ W2, mean squared error;
//   gpt: pre-LayerNorm decoder blocks (causal self-attention, GELU MLP of 4 * d), MSE against a
//        random target (the stack alone: no embedding or vocabulary).
// Usage: bench_device_train WORKLOAD [steps=20] [key=value ...], keys depth, batch (dot_relu_dot)
// and d_model, heads, seq, batch, blocks (gpt); defaults are the GPU sizes (depth 8192 and batch
// 512; d 768, 12 heads, seq 1024, batch 8, 4 blocks). Prints JSON lines: median ms per step of
// each system and the ratio nnx / LibTorch; then, from as many more steps with the device
// synchronized between the two phases, the median ms of each phase (gradients, update).
#include <nnx/nnx.h>

#include <torch/cuda.h>
#include <torch/torch.h>

#include <fmt/format.h>

#include "bench_util.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace {

using nnx::none;
using nnx::P;

// ---- dot_relu_dot --------------------------------------------------------------------------

struct DotReluDot : nnx::Module {
  DotReluDot(int64_t depth, nnx::Rngs& rngs)
      : dot1(depth, depth, rngs, {.use_bias = false}),
        w2(nnx::initializers::lecun_normal()(rngs.params(), {depth, depth})) {}
  nnx::Array operator()(const nnx::Array& x) const {
    return nnx::matmul(nnx::relu(dot1(x)), w2.value());
  }
  nnx::Linear NNX_FIELD(dot1);
  nnx::Param NNX_FIELD(w2);
};

struct TorchDotReluDot : torch::nn::Module {
  TorchDotReluDot(int64_t depth, torch::Device device)
      : w1(register_parameter("w1", torch::randn({depth, depth}, device) / std::sqrt(depth))),
        w2(register_parameter("w2", torch::randn({depth, depth}, device) / std::sqrt(depth))) {}
  torch::Tensor forward(const torch::Tensor& x) { return torch::relu(x.matmul(w1)).matmul(w2); }
  torch::Tensor w1, w2;
};

// ---- gpt ------------------------------------------------------------------------------------

struct GptSize {
  int64_t d_model = 768, heads = 12, seq = 1024, batch = 8, blocks = 4;
};

struct Block : nnx::Module {
  Block(const GptSize& s, nnx::Rngs& rngs)
      : ln1(s.d_model, rngs), attention(s.heads, s.d_model, rngs), ln2(s.d_model, rngs),
        mlp({s.d_model, 4 * s.d_model, s.d_model}, rngs,
            {.activation = [](const nnx::Array& x) { return nnx::gelu(x, true); }}) {}
  nnx::Array operator()(const nnx::Array& x) {
    nnx::Array h = x + attention(ln1(x), /*causal=*/true);
    return h + mlp(ln2(h));
  }
  nnx::LayerNorm NNX_FIELD(ln1);
  nnx::MultiHeadAttention NNX_FIELD(attention);
  nnx::LayerNorm NNX_FIELD(ln2);
  nnx::MLP NNX_FIELD(mlp);
};

struct Stack : nnx::Module {
  Stack(const GptSize& s, nnx::Rngs& rngs) {
    for (int64_t i = 0; i < s.blocks; ++i) blocks.emplace_back(s, rngs);
  }
  nnx::Array operator()(nnx::Array x) {
    for (auto& block : blocks) x = block(x);
    return x;
  }
  std::vector<Block> NNX_FIELD(blocks);
};

// The same block in LibTorch: fused qkv projection and scaled_dot_product_attention.
struct TorchBlockImpl : torch::nn::Module {
  explicit TorchBlockImpl(const GptSize& s)
      : heads(s.heads),
        ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({s.d_model})))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({s.d_model})))),
        qkv(register_module("qkv", torch::nn::Linear(s.d_model, 3 * s.d_model))),
        out(register_module("out", torch::nn::Linear(s.d_model, s.d_model))),
        up(register_module("up", torch::nn::Linear(s.d_model, 4 * s.d_model))),
        down(register_module("down", torch::nn::Linear(4 * s.d_model, s.d_model))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), n = x.size(1), d = x.size(2);
    auto split = qkv(ln1(x)).view({b, n, 3, heads, d / heads}).permute({2, 0, 3, 1, 4});
    auto y = at::scaled_dot_product_attention(split[0], split[1], split[2], {}, 0.0, true);
    auto h = x + out(y.transpose(1, 2).reshape({b, n, d}));
    return h + down(torch::gelu(up(ln2(h)), "tanh"));
  }
  int64_t heads;
  torch::nn::LayerNorm ln1, ln2;
  torch::nn::Linear qkv, out, up, down;
};
TORCH_MODULE(TorchBlock);

// ---- the two runs ---------------------------------------------------------------------------

// One Adam step of each system, in two phases (loss and gradients; the update), on inputs made
// once; a step is its two phases back to back.
struct Phases {
  std::function<void()> grad, update;
};
struct Runs {
  Phases nnx, torch;
};

Runs dot_relu_dot_runs(const std::map<std::string, int64_t>& size, torch::Device device,
                       const std::shared_ptr<const nnx::Mesh>& mesh) {
  const int64_t depth = size.at("depth"), batch = size.at("batch");
  auto rngs = std::make_shared<nnx::Rngs>(0);
  nnx::MeshContext on(mesh);
  auto model = std::make_shared<DotReluDot>(depth, *rngs);
  auto opt = std::make_shared<nnx::optim::Optimizer>(*model, nnx::optim::adam(1e-3));
  auto x_host = torch::randn({batch, depth}), y_host = torch::randn({batch, depth});
  auto x = nnx::device_put(x_host, {mesh, P()}), y = nnx::device_put(y_host, {mesh, P()});
  auto torch_model = std::make_shared<TorchDotReluDot>(depth, device);
  auto torch_opt = std::make_shared<torch::optim::Adam>(torch_model->parameters(),
                                                        torch::optim::AdamOptions(1e-3));
  auto tx = x_host.to(device), ty = y_host.to(device);
  auto grads = std::make_shared<nnx::State>();
  return {{[=] {
             *grads = nnx::grad(
                 [&](DotReluDot& m) { return nnx::mean(nnx::square(m(x) - y)); }, *model);
           },
           [=] { opt->update(*model, std::move(*grads)); }},
          {[=] {
             torch_opt->zero_grad();
             (torch_model->forward(tx) - ty).square().mean().backward();
           },
           [=] { torch_opt->step(); }}};
}

Runs gpt_runs(const std::map<std::string, int64_t>& size, torch::Device device,
              const std::shared_ptr<const nnx::Mesh>& mesh) {
  const GptSize s{size.at("d_model"), size.at("heads"), size.at("seq"), size.at("batch"),
                  size.at("blocks")};
  auto rngs = std::make_shared<nnx::Rngs>(0);
  nnx::MeshContext on(mesh);
  auto model = std::make_shared<Stack>(s, *rngs);
  auto opt = std::make_shared<nnx::optim::Optimizer>(*model, nnx::optim::adam(1e-4));
  auto x_host = torch::randn({s.batch, s.seq, s.d_model});
  auto y_host = torch::randn({s.batch, s.seq, s.d_model});
  auto x = nnx::device_put(x_host, {mesh, P()}), y = nnx::device_put(y_host, {mesh, P()});
  auto torch_model = std::make_shared<torch::nn::Sequential>();
  for (int64_t i = 0; i < s.blocks; ++i) (*torch_model)->push_back(TorchBlock(s));
  (*torch_model)->to(device);
  auto torch_opt = std::make_shared<torch::optim::Adam>((*torch_model)->parameters(),
                                                        torch::optim::AdamOptions(1e-4));
  auto tx = x_host.to(device), ty = y_host.to(device);
  auto grads = std::make_shared<nnx::State>();
  return {{[=] {
             *grads =
                 nnx::grad([&](Stack& m) { return nnx::mean(nnx::square(m(x) - y)); }, *model);
           },
           [=] { opt->update(*model, std::move(*grads)); }},
          {[=] {
             torch_opt->zero_grad();
             ((*torch_model)->forward(tx) - ty).square().mean().backward();
           },
           [=] { torch_opt->step(); }}};
}

using nnx_bench::median;

int run(int argc, char** argv) {
  NNX_CHECK(argc >= 2, "usage: bench_device_train dot_relu_dot|gpt [steps=20] [key=value ...]");
  const std::string workload = argv[1];
  NNX_CHECK(workload == "dot_relu_dot" || workload == "gpt",
            "unknown workload '{}'; pass dot_relu_dot or gpt", workload);
  int first_size = 2, steps = 20;
  if (argc > 2 && std::string(argv[2]).find('=') == std::string::npos) {
    steps = std::stoi(argv[2]);
    first_size = 3;
  }
  NNX_CHECK(steps >= 1, "steps must be at least 1, got {}", steps);
  std::map<std::string, int64_t> size =
      workload == "gpt"
          ? std::map<std::string, int64_t>{{"d_model", 768}, {"heads", 12}, {"seq", 1024},
                                           {"batch", 8}, {"blocks", 4}}
          : std::map<std::string, int64_t>{{"depth", 8192}, {"batch", 512}};
  for (int i = first_size; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto eq = arg.find('=');
    NNX_CHECK(eq != std::string::npos && size.count(arg.substr(0, eq)),
              "'{}' is not a size of {}; pass key=value with a key of its usage line", arg,
              workload);
    size[arg.substr(0, eq)] = std::stoll(arg.substr(eq + 1));
  }
  NNX_CHECK(nnx::world_size() == 1, "bench_device_train runs on one process");
  auto mesh = nnx::make_mesh({1, 1}, {"data", "model"});
  const torch::Device device = mesh->device();
  torch::manual_seed(0);
  Runs runs = workload == "gpt" ? gpt_runs(size, device, mesh)
                                : dot_relu_dot_runs(size, device, mesh);
  const auto timed = [&](const std::function<void()>& part) {  // milliseconds, synchronized
    const auto t0 = std::chrono::steady_clock::now();
    part();
    if (device.is_cuda()) torch::cuda::synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  const auto whole = [](const Phases& p) {
    return [&p] {
      p.grad();
      p.update();
    };
  };
  std::vector<double> nnx_ms, torch_ms;
  for (int i = -3; i < steps; ++i) {  // 3 warm-up steps each, alternating
    const double a = timed(whole(runs.nnx)), b = timed(whole(runs.torch));
    if (i < 0) continue;
    nnx_ms.push_back(a);
    torch_ms.push_back(b);
  }
  // Where the time goes: the same steps again, the device synchronized after each phase.
  std::vector<double> nnx_grad_ms, nnx_update_ms, torch_grad_ms, torch_update_ms;
  for (int i = 0; i < steps; ++i) {
    nnx_grad_ms.push_back(timed(runs.nnx.grad));
    nnx_update_ms.push_back(timed(runs.nnx.update));
    torch_grad_ms.push_back(timed(runs.torch.grad));
    torch_update_ms.push_back(timed(runs.torch.update));
  }
  std::string sizes;
  for (const auto& [key, value] : size) sizes += fmt::format(", \"{}\": {}", key, value);
  const std::vector<std::tuple<const char*, std::vector<double>*, std::vector<double>*,
                               std::vector<double>*>>
      systems{{"nnx", &nnx_ms, &nnx_grad_ms, &nnx_update_ms},
              {"libtorch", &torch_ms, &torch_grad_ms, &torch_update_ms}};
  for (const auto& [system, ms, grad_ms, update_ms] : systems)
    fmt::print("{{\"bench\": \"device_train\", \"workload\": \"{}\", \"system\": \"{}\", "
               "\"device\": \"{}\", \"steps\": {}{}, \"step_ms\": {:.3f}, \"grad_ms\": {:.3f}, "
               "\"update_ms\": {:.3f}}}\n",
               workload, system, device.str(), steps, sizes, median(*ms), median(*grad_ms),
               median(*update_ms));
  fmt::print("{{\"bench\": \"device_train\", \"workload\": \"{}\", \"ratio\": \"nnx/libtorch\", "
             "\"step\": {:.3f}, \"grad\": {:.3f}, \"update\": {:.3f}}}\n",
             workload, median(nnx_ms) / median(torch_ms),
             median(nnx_grad_ms) / median(torch_grad_ms),
             median(nnx_update_ms) / median(torch_update_ms));
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return nnx_bench::main_of("bench_device_train", run, argc, argv); }
