// The nnx half of the live optax comparison (tests/peers/optax_peer.py writes the inputs, runs
// optax and compares). Usage: optax_peer_values DIR TAG. Reads DIR/cases.json, the parameters and
// every step's gradients; for each case trains with nnx's optimizer and writes the parameters as
// DIR/out_TAG_<case>_<name>.bin (rank 0). On several ranks the kernel is split over the mesh and
// the bias keeps its optimizer state sharded (ZeRO), so the fused step runs on blocks.
#include "rank_agreement.h"
#include "peer_run.h"
#include "raw_files.h"

#include <nnx/nnx.h>

#include <torch/types.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <map>
#include <string>

namespace {

using nlohmann::json;
using nnx::none;
using nnx::P;
namespace optim = nnx::optim;

struct Params : nnx::Module {
  nnx::Param NNX_FIELD(kernel);
  nnx::Param NNX_FIELD(bias);
  nnx::Param NNX_FIELD(scale);
  explicit Params(const std::map<std::string, at::Tensor>& values)
      : kernel(values.at("kernel"), {.out_sharding = P("x", none)}),
        bias(values.at("bias"), {.optimizer_sharding = P("x")}),
        scale(values.at("scale")) {}
};

using nnx_peers::agreed_on_every_rank;
using nnx_peers::read_raw;
using nnx_peers::write_raw;

optim::LearningRate learning_rate(const json& spec) {
  if (!spec.is_object()) return spec.get<double>();
  if (spec["schedule"] == "warmup_cosine")
    return optim::warmup_cosine_decay_schedule(spec["init"], spec["peak"], spec["warmup"],
                                               spec["decay"]);
  std::map<int64_t, double> boundaries;
  for (const auto& [k, v] : spec["boundaries"].items()) boundaries[std::stoll(k)] = v;
  return optim::piecewise_constant_schedule(spec["init"], boundaries);
}

optim::GradientTransformation optimizer(const json& c) {
  const auto lr = learning_rate(c["lr"]);
  const std::string opt = c["opt"];
  auto optional = [&](const char* key) {
    return c.contains(key) ? std::optional<double>(c[key].get<double>()) : std::nullopt;
  };
  optim::GradientTransformation tx;
  if (opt == "sgd") tx = optim::sgd(lr, optional("momentum"), c.value("nesterov", false));
  else if (opt == "adam")
    tx = optim::adam(lr, c.value("b1", 0.9), c.value("b2", 0.999), c.value("eps", 1e-8));
  else if (opt == "adamw")
    tx = optim::adamw(lr, 0.9, 0.999, c.value("eps", 1e-8), c.value("weight_decay", 1e-4),
                      c.contains("mask") ? std::optional<nnx::Filter>(
                                               nnx::PathContains(c["mask"].get<std::string>()))
                                         : std::nullopt);
  else if (opt == "lion") tx = optim::lion(lr, 0.9, 0.99, c.value("weight_decay", 1e-3));
  else if (opt == "rmsprop")
    tx = optim::rmsprop(lr, 0.9, c.value("eps", 1e-8), c.value("initial_scale", 0.0),
                        optional("momentum"));
  else throw std::runtime_error("unknown optimizer " + opt);
  if (c.contains("clip")) tx = optim::chain({optim::clip_by_global_norm(c["clip"]), tx});
  return tx;
}

}  // namespace

int main(int argc, char** argv) {
  const auto run = nnx_peers::read_peer_run(argc, argv, "optax_peer_values", "cases.json");
  if (!run) return 2;
  const auto& [dir, tag, spec] = *run;
  const auto dtype = spec["dtype"] == "float64"    ? torch::kDouble
                     : spec["dtype"] == "bfloat16" ? torch::kBFloat16
                     : spec["dtype"] == "float16"  ? torch::kHalf
                                                   : torch::kFloat;
  auto mesh = nnx::make_mesh({nnx::world_size()}, {"x"});
  nnx::MeshContext on(mesh);
  for (const auto& c : spec["cases"]) {
    std::map<std::string, at::Tensor> values;
    for (const auto& [name, shape] : spec["shapes"].items())
      values[name] = read_raw(dir + "/param_" + name + ".bin", shape, dtype);
    Params model(values);
    optim::Optimizer opt(model, optimizer(c));
    for (int step = 0; step < spec["steps"].get<int>(); ++step) {
      nnx::State grads;
      for (const auto& [path, p] : nnx::state(model)) {
        auto whole = read_raw(fmt::format("{}/grad_{}_{}.bin", dir, step, path),
                              spec["shapes"][path], dtype);
        grads.add(path, nnx::Param(nnx::device_put(whole, {mesh, p.value().spec()})));
      }
      opt.update(model, grads);
    }
    for (const auto& [path, p] : nnx::state(model)) {
      auto whole = agreed_on_every_rank(nnx::gather(p.value()), path);
      if (nnx::world_rank() == 0)
        write_raw(fmt::format("{}/out_{}_{}_{}.bin", dir, tag, c["name"].get<std::string>(), path),
                  whole);
    }
  }
  return 0;
}
