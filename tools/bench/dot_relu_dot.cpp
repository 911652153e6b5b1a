// The seed-003 guide's DotReluDot (two depth x depth matmuls, the first kernel's columns and the
// second's rows over "model") trained with Adam on a (data, model) mesh: the guide's layout, with
// the batch over "data" and the hidden activations constrained to P("data", "model").
// Run: mpirun -np D*M bench_dot_relu_dot DEPTH [data=2] [model=4] [batch=256] [steps=10].
// Prints one JSON line (rank 0): median ms per step and samples/s.
#include <nnx/nnx.h>

#include <torch/torch.h>

#include <fmt/format.h>

#include <string>

#include "bench_util.h"

namespace {

using nnx::none;
using nnx::P;

struct DotReluDot : nnx::Module {
  DotReluDot(int64_t depth, nnx::Rngs& rngs)
      : dot1(depth, depth, rngs,
             {.use_bias = false, .kernel_metadata = {.out_sharding = P(none, "model")}}),
        w2(nnx::with_partitioning(nnx::initializers::lecun_normal(), P("model", none))(
            rngs.params(), {depth, depth})) {}

  nnx::Array operator()(const nnx::Array& x) const {
    nnx::Array y = nnx::relu(dot1(x));
    y = nnx::with_sharding_constraint(y, P("data", "model"));
    return nnx::matmul(y, w2.value());
  }

  nnx::Linear NNX_FIELD(dot1);
  nnx::Param NNX_FIELD(w2);
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: bench_dot_relu_dot DEPTH [data=2] [model=4] [batch=256] [steps=10]\n");
    return 2;
  }
  const int64_t depth = std::stoll(argv[1]);
  const int64_t data = argc > 2 ? std::stoll(argv[2]) : 2;
  const int64_t model_axis = argc > 3 ? std::stoll(argv[3]) : 4;
  const int64_t batch = argc > 4 ? std::stoll(argv[4]) : 256;
  const int steps = argc > 5 ? std::stoi(argv[5]) : 10;
  auto mesh = nnx::make_mesh({data, model_axis}, {"data", "model"});
  nnx::MeshContext on(mesh);
  nnx::Rngs rngs(0);
  DotReluDot model(depth, rngs);
  nnx::optim::Optimizer opt(model, nnx::optim::adam(1e-3));
  auto x = nnx::device_put(torch::randn({batch, depth}), {mesh, P("data", none)});
  auto y = nnx::device_put(torch::randn({batch, depth}), {mesh, P("data", none)});
  auto step = [&] {
    auto [loss, grads] = nnx::value_and_grad(
        [&](DotReluDot& m) { return nnx::mean(nnx::square(m(x) - y)); }, model);
    opt.update(model, grads);
    nnx::Communicator::world().barrier();
  };
  const double seconds = nnx_bench::median_seconds(step, steps, 2);
  if (nnx::world_rank() == 0)
    fmt::print("{{\"bench\": \"dot_relu_dot\", \"system\": \"nnx\", \"depth\": {}, \"mesh\": [{}, {}], "
               "\"batch\": {}, \"threads\": {}, \"step_ms\": {:.2f}, \"samples_per_s\": {:.1f}}}\n",
               depth, data, model_axis, batch, at::get_num_threads(), seconds * 1e3,
               batch / seconds);
  return 0;
}
