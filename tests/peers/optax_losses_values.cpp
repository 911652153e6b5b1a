// The nnx half of the live comparison of losses with optax (tests/peers/optax_losses_peer.py
// writes the inputs, runs optax and compares). Usage: optax_losses_values DIR TAG. Reads
// DIR/inputs.json and the float32 inputs it names; for each loss writes its values and the
// gradient of their sum with respect to the first input as DIR/<TAG>_<loss>_{value,grad}.bin
// (rank 0). On several ranks the inputs' rows are split over the mesh.
#include "rank_agreement.h"
#include "peer_run.h"
#include "raw_files.h"

#include <nnx/nnx.h>

#include <torch/types.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <string>

namespace {

using nlohmann::json;
using nnx::Array;

// The first input of a loss, as a parameter so that value_and_grad differentiates it.
struct First : nnx::Module {
  nnx::Param NNX_FIELD(x);
  explicit First(const Array& value) : x(value) {}
};

using nnx_peers::agreed_on_every_rank;
using nnx_peers::read_raw;
using nnx_peers::write_raw;

using Loss = std::function<Array(const Array&, const Array&)>;

const std::map<std::string, Loss>& losses() {
  static const std::map<std::string, Loss> all{
      {"softmax_cross_entropy_with_integer_labels",
       [](auto& x, auto& y) { return nnx::softmax_cross_entropy_with_integer_labels(x, y); }},
      {"softmax_cross_entropy", [](auto& x, auto& y) { return nnx::softmax_cross_entropy(x, y); }},
      {"sigmoid_binary_cross_entropy",
       [](auto& x, auto& y) { return nnx::sigmoid_binary_cross_entropy(x, y); }},
      {"huber_loss", [](auto& x, auto& y) { return nnx::huber_loss(x, y, 1.5); }},
      {"squared_error", [](auto& x, auto& y) { return nnx::squared_error(x, y); }},
      {"l2_loss", [](auto& x, auto& y) { return nnx::l2_loss(x, y); }},
      // The mean of the integer-label losses, as one op.
      {"cross_entropy_mean", [](auto& x, auto& y) { return nnx::cross_entropy(x, y); }},
  };
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  const auto run = nnx_peers::read_peer_run(argc, argv, "optax_losses_values");
  if (!run) return 2;
  const auto& [dir, tag, spec] = *run;
  auto mesh = nnx::make_mesh({nnx::world_size()}, {"x"});
  auto input = [&](const std::string& name) {
    const json& in = spec["inputs"][name];
    const bool integer = in["dtype"] == "int64";
    at::Tensor whole = read_raw(dir + "/" + name + ".bin", in["shape"].get<std::vector<int64_t>>(),
                                integer ? torch::kLong : torch::kFloat);
    return nnx::device_put(whole, {mesh, nnx::P("x")});  // rows split over the ranks
  };
  for (const auto& [name, args] : spec["losses"].items()) {
    const Loss& loss = losses().at(name);
    First first(input(args[0]));
    const Array second = input(args[1]);
    Array values;
    auto [total, grads] = nnx::value_and_grad(
        [&](First& m) {
          values = loss(m.x.value(), second);
          return nnx::sum(values);
        },
        first);
    const at::Tensor value = agreed_on_every_rank(nnx::gather(values), name + " value");
    const at::Tensor grad = agreed_on_every_rank(nnx::gather(grads["x"].value()), name + " grad");
    if (nnx::world_rank() == 0) {
      write_raw(fmt::format("{}/{}_{}_value.bin", dir, tag, name), value.detach());
      write_raw(fmt::format("{}/{}_{}_grad.bin", dir, tag, name), grad);
    }
  }
  return 0;
}
