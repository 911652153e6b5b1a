// The nnx half of the live Flax comparison (tests/peers/flax_peer.py runs the Flax half and
// compares). Modes, each writing JSON to `out` on rank 0:
//   layers OUT                 every layer with a Flax twin, built with Rngs(0): its state's values
//   forward OUT                those layers called: outputs and their parameters' gradients
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

// The layer's output on x, and the gradients of its parameters for the loss
// 0.5 sum(y^2) + 0.375 sum(y) (flax_peer.py's forward_loss).
template <class M, class Call>
nlohmann::json forward(M& layer, const Call& call) {
  nnx::Array out;
  auto [loss, grads] = nnx::value_and_grad(
      [&](M& m) {
        out = call(m);
        return nnx::sum(nnx::square(out)) * 0.5 + nnx::sum(out) * 0.375;
      },
      layer);
  const at::Tensor y = nnx::gather(out).detach().contiguous().to(torch::kFloat);
  return {{"output", std::vector<float>(y.data_ptr<float>(), y.data_ptr<float>() + y.numel())},
          {"shape", y.sizes().vec()},
          {"grads", grads.to_json(/*with_values=*/true)}};
}

// Each layer of `layers` built with Rngs(0), called on inputs drawn with jax.random's normal
// (key 3): outputs and gradients; for BatchNorm also its running averages after the training
// call, and its output in eval mode.
nlohmann::json forwards() {
  auto input = [](nnx::Shape shape) {
    return nnx::Array(nnx::random::normal(nnx::random::key(3), shape));
  };
  nlohmann::json doc;
  const nnx::Array x16 = input({3, 16}), x6 = input({4, 6}), x8 = input({3, 8});
  {
    nnx::Linear layer(16, 32, nnx::Rngs(0));
    doc["Linear"] = forward(layer, [&](auto& m) { return m(x16); });
  }
  {
    nnx::Embed layer(10, 8, nnx::Rngs(0));
    const nnx::Array ids(torch::tensor({1, 3, 3, 9, 0}));
    doc["Embed"] = forward(layer, [&](auto& m) { return m(ids); });
    doc["Embed.attend"] = forward(layer, [&](auto& m) { return m.attend(input({2, 8})); });
  }
  {
    nnx::Conv layer(3, 8, {3, 3}, nnx::Rngs(0));
    doc["Conv"] = forward(layer, [&](auto& m) { return m(input({2, 6, 6, 3})); });
    nnx::Conv strided(3, 8, {3, 3}, nnx::Rngs(0), {.strides = {2, 2}, .padding = "VALID"});
    doc["Conv.strided"] = forward(strided, [&](auto& m) { return m(input({2, 7, 7, 3})); });
  }
  {
    nnx::LayerNorm layer(6, nnx::Rngs(0));
    doc["LayerNorm"] = forward(layer, [&](auto& m) { return m(x6); });
    nnx::RMSNorm rms(6, nnx::Rngs(0));
    doc["RMSNorm"] = forward(rms, [&](auto& m) { return m(x6); });
  }
  {
    nnx::BatchNorm layer(6, nnx::Rngs(0));
    doc["BatchNorm"] = forward(layer, [&](auto& m) { return m(x6); });
    doc["BatchNorm.state"] = nnx::state(layer).to_json(/*with_values=*/true);
    layer.eval();
    doc["BatchNorm.eval"] = forward(layer, [&](auto& m) { return m(x6); });
  }
  {
    nnx::MultiHeadAttention layer(4, 16, nnx::Rngs(0));
    const nnx::Array x = input({2, 5, 16});
    doc["MultiHeadAttention"] = forward(layer, [&](auto& m) { return m(x); });
    doc["MultiHeadAttention.causal"] = forward(layer, [&](auto& m) { return m(x, true); });
  }
  {
    nnx::LinearGeneral layer({16}, {4, 4}, nnx::Rngs(0));
    doc["LinearGeneral"] = forward(layer, [&](auto& m) { return m(x16); });
  }
  {
    nnx::Rngs rngs(0);
    nnx::Sequential layer{nnx::Linear(4, 3, rngs), nnx::relu, nnx::Linear(3, 4, rngs)};
    doc["Sequential"] = forward(layer, [&](auto& m) { return m(input({3, 4})); });
  }
  {
    nnx::LoRA layer(8, 2, 12, nnx::Rngs(0));
    doc["LoRA"] = forward(layer, [&](auto& m) { return m(x8); });
    nnx::LoRALinear linear(8, 12, 2, nnx::Rngs(0));
    doc["LoRALinear"] = forward(linear, [&](auto& m) { return m(x8); });
  }
  {
    // Two training calls each (a fresh key per call), from the default stream and a "dropout" one.
    nnx::Dropout plain(0.5, nnx::Rngs(0));
    nnx::Dropout seeded(0.25, nnx::Rngs(0, {{"dropout", 1}}));
    for (auto* layer : {&plain, &seeded}) {
      auto& calls = doc[layer == &plain ? "Dropout" : "Dropout.seeded"];
      for (int call = 0; call < 2; ++call) {
        const at::Tensor y = nnx::gather((*layer)(x6)).contiguous();
        calls.push_back(std::vector<float>(y.data_ptr<float>(), y.data_ptr<float>() + y.numel()));
      }
    }
  }
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
      "usage: flax_peer_values layers OUT | forward OUT | dot_relu_dot DATA MODEL OUT | "
      "random DIR\n";
  try {
    std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "layers" && argc == 3) {
      write_json(argv[2], layers());
    } else if (mode == "forward" && argc == 3) {
      write_json(argv[2], forwards());
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
