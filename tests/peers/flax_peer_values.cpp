// The nnx half of the live Flax comparison (tests/peers/flax_peer.py runs the Flax half and
// compares). Modes, each writing JSON to `out` on rank 0:
//   layers OUT                 every layer with a Flax twin, built with Rngs(0): its state's values
//   dot_relu_dot D M OUT       the seed-003 guide on a (data D, model M) mesh: 5 Adam steps of MSE
//   random DIR                 2^20 samples each of normal, truncated_normal and uniform (raw f32)
#include <nnx/nnx.h>

#include <torch/types.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <functional>
#include <string>

namespace {

using nnx::none;
using nnx::P;

// The guide's layer: two matmuls with a relu between, the kernels split over "model".
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

void write_json(const std::string& path, const nlohmann::json& doc) {
  if (nnx::world_rank() != 0) return;
  std::ofstream out(path);
  out << doc.dump();
  if (!out) throw std::runtime_error("cannot write " + path);
}

nlohmann::json layers() {
  nlohmann::json doc;
  auto add = [&](const std::string& name, const std::function<nnx::State(nnx::Rngs&)>& build) {
    nnx::Rngs rngs(0);
    doc[name] = build(rngs).to_json(/*with_values=*/true);
  };
  add("Linear", [](nnx::Rngs& r) { return nnx::state(nnx::Linear(16, 32, r)); });
  add("Embed", [](nnx::Rngs& r) { return nnx::state(nnx::Embed(10, 8, r)); });
  add("Conv", [](nnx::Rngs& r) { return nnx::state(nnx::Conv(3, 8, {3, 3}, r)); });
  add("LayerNorm", [](nnx::Rngs& r) { return nnx::state(nnx::LayerNorm(6, r)); });
  add("RMSNorm", [](nnx::Rngs& r) { return nnx::state(nnx::RMSNorm(6, r)); });
  add("BatchNorm", [](nnx::Rngs& r) { return nnx::state(nnx::BatchNorm(6, r)); });
  add("MultiHeadAttention",
      [](nnx::Rngs& r) { return nnx::state(nnx::MultiHeadAttention(4, 16, r)); });
  add("LinearGeneral",
      [](nnx::Rngs& r) { return nnx::state(nnx::LinearGeneral({16}, {4, 4}, r)); });
  add("Sequential", [](nnx::Rngs& r) {  // layers draw their keys left to right
    return nnx::state(nnx::Sequential{nnx::Linear(4, 3, r), nnx::relu, nnx::Linear(3, 4, r)});
  });
  add("LoRA", [](nnx::Rngs& r) { return nnx::state(nnx::LoRA(8, 2, 12, r)); });
  add("LoRALinear", [](nnx::Rngs& r) { return nnx::state(nnx::LoRALinear(8, 12, 2, r)); });
  return doc;
}

void write_f32(const std::string& path, const at::Tensor& t) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(t.contiguous().data_ptr()), t.numel() * sizeof(float));
  if (!out) throw std::runtime_error("cannot write " + path);
}

void random_samples(const std::string& dir) {
  const nnx::Shape shape{1 << 20};
  write_f32(dir + "/normal.f32", nnx::random::normal(nnx::random::key(0), shape));
  write_f32(dir + "/truncated_normal.f32",
            nnx::random::truncated_normal(nnx::random::key(1), -2, 2, shape));
  write_f32(dir + "/uniform.f32", nnx::random::uniform(nnx::random::key(2), shape, -3, 5));
}

nlohmann::json dot_relu_dot(int64_t data, int64_t model_ways) {
  auto mesh = nnx::make_mesh({data, model_ways}, {"data", "model"});
  nnx::MeshContext on(mesh);
  nnx::Rngs rngs(0);
  DotReluDot model(1024, rngs);
  nnx::optim::Optimizer optimizer(model, nnx::optim::adam(1e-3));
  auto x = nnx::device_put(nnx::random::normal(nnx::random::key(1), {8, 1024}), {mesh, P("data", none)});
  auto y = nnx::device_put(nnx::random::normal(nnx::random::key(2), {8, 1024}), {mesh, P("data", none)});
  std::vector<double> losses;
  for (int step = 0; step < 5; ++step) {
    auto [loss, grads] = nnx::value_and_grad(
        [&](DotReluDot& m) { return nnx::mean_squared_error(m(x), y); }, model);
    optimizer.update(model, grads);
    losses.push_back(nnx::gather(loss).item<double>());
  }
  return {{"mesh", {data, model_ways}}, {"ranks", nnx::world_size()}, {"losses", losses}};
}

}  // namespace

int main(int argc, char** argv) {
  const std::string usage =
      "usage: flax_peer_values layers OUT | dot_relu_dot DATA MODEL OUT | random DIR\n";
  try {
    std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "layers" && argc == 3) {
      write_json(argv[2], layers());
    } else if (mode == "random" && argc == 3) {
      random_samples(argv[2]);
    } else if (mode == "dot_relu_dot" && argc == 5) {
      write_json(argv[4], dot_relu_dot(std::stoll(argv[2]), std::stoll(argv[3])));
    } else {
      fmt::print(stderr, "{}", usage);
      return 2;
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "flax_peer_values: {}\n", e.what());
    return 1;
  }
  return 0;
}
