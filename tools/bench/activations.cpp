// Activations that nnx computes as JAX writes them, each one autograd node, on one large
// activation: the exact GELU, x/2 erfc(-x/sqrt(2)), and SiLU, x sigmoid(x). Each against the same
// formula as LibTorch ops, the form nnx used before, and LibTorch's fused kernel, which rounds
// otherwise (torch::gelu(x, "none"), x/2 (1 + erf), loses the float32 tail). Prints one JSON line
// per system: the median milliseconds of a forward and backward pass (the systems of an
// activation alternate call by call), its ratio to LibTorch's kernel, and the MiB the autograd
// graph holds between the two passes besides x and the output.
// Usage: bench_activations [rows=4096] [cols=4096] [reps=15]
#include <nnx/nnx.h>

#include <torch/torch.h>

#include <fmt/format.h>

#include <malloc.h>

#include <array>
#include <functional>
#include <string>

#include "bench_util.h"

namespace {

// Bytes the process has allocated (heap and mapped blocks).
size_t allocated_bytes() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

struct System {
  std::string activation, name;
  std::function<at::Tensor(const at::Tensor&)> forward;
  std::vector<double> seconds{};
  double held_mib = 0;
};

int run(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::stoll(argv[1]) : 4096;
  const int64_t cols = argc > 2 ? std::stoll(argv[2]) : 4096;
  const int reps = argc > 3 ? std::stoi(argv[3]) : 15;
  torch::manual_seed(0);
  const at::Tensor x = torch::randn({rows, cols}).requires_grad_();
  const at::Tensor cotangent = torch::rand({rows, cols});
  const std::array<std::array<System, 3>, 2> activations{
      std::array<System, 3>{
          System{"gelu_exact", "nnx",
                 [](const at::Tensor& t) { return nnx::gelu(nnx::Array(t), false).local(); }},
          System{"gelu_exact", "libtorch_composite",
                 [](const at::Tensor& t) {
                   return 0.5 * t * torch::erfc(t * (-std::sqrt(2.0) / 2));
                 }},
          System{"gelu_exact", "libtorch_kernel",
                 [](const at::Tensor& t) { return torch::gelu(t, "none"); }}},
      std::array<System, 3>{
          System{"silu", "nnx",
                 [](const at::Tensor& t) { return nnx::silu(nnx::Array(t)).local(); }},
          System{"silu", "libtorch_composite",
                 [](const at::Tensor& t) { return t * t.sigmoid(); }},
          System{"silu", "libtorch_kernel", [](const at::Tensor& t) { return torch::silu(t); }}}};
  for (auto systems : activations) {
    for (auto& s : systems) {
      const size_t before = allocated_bytes();
      at::Tensor y = s.forward(x);
      const size_t after = allocated_bytes();
      const double held = static_cast<double>(after - before) - static_cast<double>(y.nbytes());
      s.held_mib = held / (1 << 20);
      y.backward(cotangent);
      x.mutable_grad().reset();
    }
    for (int r = 0; r < reps + 2; ++r)
      for (auto& s : systems) {
        const double seconds = nnx_bench::median_seconds(
            [&] {
              s.forward(x).backward(cotangent);
              x.mutable_grad().reset();
            },
            1, 0);
        if (r >= 2) s.seconds.push_back(seconds);  // two rounds warm the allocator and caches
      }
    const double kernel_ms = nnx_bench::median(systems[2].seconds) * 1e3;
    for (const auto& s : systems) {
      const double ms = nnx_bench::median(s.seconds) * 1e3;
      fmt::print("{{\"bench\": \"activations\", \"activation\": \"{}\", \"system\": \"{}\", "
                 "\"shape\": [{}, {}], \"ms\": {:.2f}, \"ratio_to_libtorch_kernel\": {:.3f}, "
                 "\"held_for_backward_mib\": {:.1f}}}\n",
                 s.activation, s.name, rows, cols, ms, ms / kernel_ms, s.held_mib);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return nnx_bench::main_of("bench_activations", run, argc, argv); }
