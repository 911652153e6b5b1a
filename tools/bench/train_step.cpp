// One train step of an MLP (784-1024-1024-10, cross entropy, Adam) in nnx against the same step
// written by hand with torch::nn::Linear and torch::optim::Adam, in one process, same threads.
// Under mpirun -np N, nnx trains data parallel (global batch split over N) and rank 0 prints the
// samples/s of all ranks together; the LibTorch step runs on one process only (-np 1).
// Prints JSON lines: medians of the whole step and of its two halves, and nnx / LibTorch.
#include <nnx/nnx.h>

#include <torch/torch.h>

#include <fmt/format.h>

#include <string>

#include "bench_util.h"

namespace {

struct Mlp : nnx::Module {
  Mlp(int64_t width, nnx::Rngs& rngs)
      : hidden1(784, width, rngs), hidden2(width, width, rngs), head(width, 10, rngs) {}
  nnx::Array operator()(const nnx::Array& x) {
    return head(nnx::relu(hidden2(nnx::relu(hidden1(x)))));
  }
  nnx::Linear NNX_FIELD(hidden1);
  nnx::Linear NNX_FIELD(hidden2);
  nnx::Linear NNX_FIELD(head);
};

struct TorchMlp : torch::nn::Module {
  explicit TorchMlp(int64_t width)
      : hidden1(register_module("hidden1", torch::nn::Linear(784, width))),
        hidden2(register_module("hidden2", torch::nn::Linear(width, width))),
        head(register_module("head", torch::nn::Linear(width, 10))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return head(torch::relu(hidden2(torch::relu(hidden1(x)))));
  }
  torch::nn::Linear hidden1, hidden2, head;
};

struct Timings {
  double step, grad, update;
};

Timings time_nnx(int64_t batch, int64_t width, int reps) {
  auto mesh = nnx::make_mesh({nnx::world_size()}, {"data"});
  nnx::MeshContext on(mesh);
  nnx::Rngs rngs(0);
  Mlp model(width, rngs);
  nnx::optim::Optimizer opt(model, nnx::optim::adam(1e-4));
  auto x = nnx::device_put(torch::randn({batch, 784}), {mesh, nnx::P("data")});
  auto y = nnx::device_put(torch::randint(10, {batch}), {mesh, nnx::P("data")});
  auto grad = [&] {
    return nnx::value_and_grad(
        [&](Mlp& m) { return nnx::cross_entropy(m(x), y); }, model);
  };
  auto [loss, grads] = grad();
  Timings t{};
  t.step = nnx_bench::median_seconds([&] { opt.update(model, grad().grads); }, reps);
  t.grad = nnx_bench::median_seconds([&] { grad(); }, reps);
  t.update = nnx_bench::median_seconds([&] { opt.update(model, grads); }, reps);
  return t;
}

Timings time_torch(int64_t batch, int64_t width, int reps) {
  torch::manual_seed(0);
  auto model = std::make_shared<TorchMlp>(width);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-4));
  auto x = torch::randn({batch, 784});
  auto y = torch::randint(10, {batch});
  auto grad = [&] {
    opt.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(x), y).backward();
  };
  Timings t{};
  t.step = nnx_bench::median_seconds([&] { grad(); opt.step(); }, reps);
  t.grad = nnx_bench::median_seconds(grad, reps);
  t.update = nnx_bench::median_seconds([&] { opt.step(); }, reps);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::stoi(argv[1]) : 50;
  const int64_t batch = 256, width = 1024;
  const int ranks = nnx::world_size();
  Timings n = time_nnx(batch, width, reps);
  if (nnx::world_rank() != 0) return 0;
  const auto line = [&](const char* system, const Timings& t) {
    fmt::print("{{\"bench\": \"train_step\", \"system\": \"{}\", \"ranks\": {}, \"threads\": {}, "
               "\"global_batch\": {}, \"step_ms\": {:.2f}, \"value_and_grad_ms\": {:.2f}, "
               "\"update_ms\": {:.2f}, \"samples_per_s\": {:.0f}}}\n",
               system, ranks, at::get_num_threads(), batch, t.step * 1e3, t.grad * 1e3,
               t.update * 1e3, batch / t.step);
  };
  line("nnx", n);
  if (ranks > 1) return 0;
  Timings t = time_torch(batch, width, reps);
  line("libtorch", t);
  fmt::print("{{\"bench\": \"train_step\", \"ratio\": \"nnx/libtorch\", \"step\": {:.3f}, "
             "\"value_and_grad\": {:.3f}, \"update\": {:.3f}}}\n",
             n.step / t.step, n.grad / t.grad, n.update / t.update);
  return 0;
}
