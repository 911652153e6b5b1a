// The nnx half of the live comparison of result dtypes with jax.numpy and optax
// (tests/peers/jnp_dtypes_peer.py writes the inputs, runs the peers and compares). Usage:
// jnp_dtypes_values DIR TAG. Reads DIR/inputs.json: inputs of every dtype (a_<dtype> and
// b_<dtype> [4, 6], m_<dtype> [6, 3], c_<dtype> [3]; class indices l_<integer dtype> [4]; cond
// [4, 6] bool) and the cases, each an op and the inputs it takes. On a mesh of several ranks
// the [4, 6] inputs are split by rows. Rank 0 writes each case's value as DIR/<TAG>_<case>.bin
// and DIR/<TAG>_results.json: per case its dtype and shape, or the error nnx threw.
#include "rank_agreement.h"
#include "peer_run.h"
#include "raw_files.h"

#include <nnx/nnx.h>

#include <torch/types.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <exception>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace {

using nlohmann::json;
using nnx::Array;
using nnx_peers::agreed_on_every_rank;
using nnx_peers::read_raw;
using nnx_peers::write_raw;

// numpy's dtype names, both ways.
const std::map<std::string, at::ScalarType>& dtypes() {
  static const std::map<std::string, at::ScalarType> names = {
      {"bool", at::kBool},   {"uint8", at::kByte},        {"int8", at::kChar},
      {"int16", at::kShort}, {"int32", at::kInt},         {"int64", at::kLong},
      {"float16", at::kHalf}, {"bfloat16", at::kBFloat16}, {"float32", at::kFloat},
      {"float64", at::kDouble}};
  return names;
}

std::string numpy_name(at::ScalarType dtype) {
  for (const auto& [name, type] : dtypes())
    if (type == dtype) return name;
  return c10::toString(dtype);
}

using Args = std::vector<Array>;
using Op = std::function<Array(const Args&)>;

// Each op as jnp_dtypes_peer.py's OPS computes it with jax.numpy.
const std::map<std::string, Op>& ops() {
  static const std::map<std::string, Op> table = {
      {"add", [](const Args& a) { return nnx::add(a[0], a[1]); }},
      {"sub", [](const Args& a) { return nnx::sub(a[0], a[1]); }},
      {"mul", [](const Args& a) { return nnx::mul(a[0], a[1]); }},
      {"div", [](const Args& a) { return nnx::div(a[0], a[1]); }},
      {"maximum", [](const Args& a) { return nnx::maximum(a[0], a[1]); }},
      {"minimum", [](const Args& a) { return nnx::minimum(a[0], a[1]); }},
      {"matmul", [](const Args& a) { return nnx::matmul(a[0], a[1]); }},
      {"linear", [](const Args& a) { return nnx::linear(a[0], a[1], a[2]); }},
      {"concatenate", [](const Args& a) { return nnx::concatenate({a[0], a[1]}, 0); }},
      {"where", [](const Args& a) { return nnx::where(a[0], a[1], a[2]); }},
      {"where_nonzero", [](const Args& a) { return nnx::where(a[0], a[1], 0.5); }},
      {"less", [](const Args& a) { return nnx::less(a[0], a[1]); }},
      {"neg", [](const Args& a) { return nnx::neg(a[0]); }},
      {"abs", [](const Args& a) { return nnx::abs(a[0]); }},
      {"exp", [](const Args& a) { return nnx::exp(a[0]); }},
      {"sqrt", [](const Args& a) { return nnx::sqrt(a[0]); }},
      {"square", [](const Args& a) { return nnx::square(a[0]); }},
      {"tanh", [](const Args& a) { return nnx::tanh(a[0]); }},
      {"relu", [](const Args& a) { return nnx::relu(a[0]); }},
      {"sum", [](const Args& a) { return nnx::sum(a[0]); }},
      {"sum_rows", [](const Args& a) { return nnx::sum(a[0], {1}); }},
      {"mean", [](const Args& a) { return nnx::mean(a[0]); }},
      {"mean_columns", [](const Args& a) { return nnx::mean(a[0], {0}); }},
      {"max_rows", [](const Args& a) { return nnx::max(a[0], 1); }},
      {"argmax_rows", [](const Args& a) { return nnx::argmax(a[0], 1); }},
      {"softmax", [](const Args& a) { return nnx::softmax(a[0], -1); }},
      {"log_softmax", [](const Args& a) { return nnx::log_softmax(a[0], -1); }},
      {"clip", [](const Args& a) { return nnx::clip(a[0], -1.0, 2.0); }},
      {"add_2_5", [](const Args& a) { return a[0] + 2.5; }},
      {"mul_2_5", [](const Args& a) { return a[0] * 2.5; }},
      {"add_2", [](const Args& a) { return a[0] + 2.0; }},
      {"xent_labels",
       [](const Args& a) { return nnx::softmax_cross_entropy_with_integer_labels(a[0], a[1]); }},
      {"embed", [](const Args& a) { return nnx::embedding_lookup(a[0], a[1]); }},
      {"mean_squared_error", [](const Args& a) { return nnx::mean_squared_error(a[0], a[1]); }},
      {"huber_loss", [](const Args& a) { return nnx::huber_loss(a[0], a[1]); }},
      {"l2_loss", [](const Args& a) { return nnx::l2_loss(a[0], a[1]); }},
      {"softmax_xent", [](const Args& a) { return nnx::softmax_cross_entropy(a[0], a[1]); }},
      {"sigmoid_bce", [](const Args& a) { return nnx::sigmoid_binary_cross_entropy(a[0], a[1]); }},
      {"not_equal", [](const Args& a) { return nnx::not_equal(a[0], a[1]); }},
      {"greater_equal", [](const Args& a) { return nnx::greater_equal(a[0], a[1]); }},
      {"logical_and", [](const Args& a) { return nnx::logical_and(a[0], a[1]); }},
      {"logical_or", [](const Args& a) { return nnx::logical_or(a[0], a[1]); }},
      {"log", [](const Args& a) { return nnx::log(a[0]); }},
      {"sin", [](const Args& a) { return nnx::sin(a[0]); }},
      {"cos", [](const Args& a) { return nnx::cos(a[0]); }},
      {"rsqrt", [](const Args& a) { return nnx::rsqrt(a[0]); }},
      {"sigmoid", [](const Args& a) { return nnx::sigmoid(a[0]); }},
      {"gelu", [](const Args& a) { return nnx::gelu(a[0]); }},
      {"gelu_exact", [](const Args& a) { return nnx::gelu(a[0], false); }},
      {"silu", [](const Args& a) { return nnx::silu(a[0]); }},
      {"softplus", [](const Args& a) { return nnx::softplus(a[0]); }},
      {"log_sigmoid", [](const Args& a) { return nnx::log_sigmoid(a[0]); }},
      {"power_2", [](const Args& a) { return nnx::power(a[0], 2.0); }},
      {"power_0_5", [](const Args& a) { return nnx::power(a[0], 0.5); }},
      {"isfinite", [](const Args& a) { return nnx::isfinite(a[0]); }},
      {"isnan", [](const Args& a) { return nnx::isnan(a[0]); }},
      {"logical_not", [](const Args& a) { return nnx::logical_not(a[0]); }},
      {"min_rows", [](const Args& a) { return nnx::min(a[0], 1); }},
      {"argmin_rows", [](const Args& a) { return nnx::argmin(a[0], 1); }},
      {"equal_2", [](const Args& a) { return a[0] == 2.0; }},
      {"less_0_5", [](const Args& a) { return a[0] < 0.5; }},
      {"where_0_5", [](const Args& a) { return nnx::where(a[0] > 0.0, a[0], 0.5); }},
      {"where_2", [](const Args& a) { return nnx::where(a[0] > 0.0, a[0], 2.0); }},
      {"power_3", [](const Args& a) { return nnx::power(a[0], 3.0); }},
      {"power_129", [](const Args& a) { return nnx::power(a[0], 129.0); }},
      {"add_0d", [](const Args& a) { return nnx::add(nnx::sum(a[0]), a[0]); }},
      {"where_0d", [](const Args& a) { return nnx::where(a[0] > 0.0, nnx::sum(a[0]), a[0]); }},
      {"vector_matmul",
       [](const Args& a) {
         return nnx::matmul(nnx::select(a[0], 0, 0), nnx::select(a[0], 0, 1));
       }},
      {"vector_left",
       [](const Args& a) {
         return nnx::matmul(nnx::select(a[0], 0, 0), nnx::transpose(a[0], 0, 1));
       }},
      {"vector_right", [](const Args& a) { return nnx::matmul(a[0], nnx::select(a[0], 0, 0)); }},
  };
  return table;
}

}  // namespace

int main(int argc, char** argv) {
  const auto run = nnx_peers::read_peer_run(argc, argv, "jnp_dtypes_values");
  if (!run) return 2;
  const auto& [dir, tag, spec] = *run;
  const int n = nnx::world_size();
  auto mesh = nnx::make_mesh({n}, {"a"});
  std::map<std::string, Array> placed;
  for (const auto& [name, in] : spec["inputs"].items()) {
    const auto shape = in["shape"].get<std::vector<int64_t>>();
    const at::Tensor whole =
        read_raw(dir + "/" + name + ".bin", shape, dtypes().at(in["dtype"].get<std::string>()));
    // Rows split over the ranks where they divide; m_* (the right operands) whole.
    const bool split = shape.size() == 2 && shape[0] == 4 && 4 % n == 0;
    placed[name] = nnx::device_put(whole, {mesh, split ? nnx::P("a") : nnx::P()});
  }
  json results;
  for (const auto& [name, call] : spec["cases"].items()) {
    Args args;
    for (size_t i = 1; i < call.size(); ++i) args.push_back(placed.at(call[i].get<std::string>()));
    try {
      const Array value = ops().at(call[0].get<std::string>())(args);
      const at::Tensor whole = agreed_on_every_rank(nnx::gather(value), tag + " " + name);
      results[name] = {{"dtype", numpy_name(whole.scalar_type())}, {"shape", whole.sizes().vec()}};
      if (nnx::world_rank() == 0) write_raw(fmt::format("{}/{}_{}.bin", dir, tag, name), whole);
    } catch (const std::exception& e) {
      results[name] = {{"error", e.what()}};
    }
  }
  if (nnx::world_rank() == 0) std::ofstream(fmt::format("{}/{}_results.json", dir, tag)) << results;
  return 0;
}
