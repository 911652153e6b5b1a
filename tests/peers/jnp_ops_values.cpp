// The nnx half of the live comparison of ops with jax.numpy and Flax (tests/peers/jnp_ops_peer.py
// writes the inputs, runs the peers and compares). Usage: jnp_ops_values DIR TAG. Reads
// DIR/inputs.json and the inputs it names (float32, and int64 ids). The mesh is (a, b) over the
// ranks, and each layout round lays every input out another way (kRounds); per round and case it
// writes on rank 0 the op's value and, for each input the case lists, the gradient of
// 0.5 sum(out^2) + 0.375 sum(out) (the peer's COTANGENT_SHIFT), or of sum(out) for the cases
// inputs.json lists under linear_loss, as DIR/<TAG>_<round>_<case>_value.bin and
// ..._grad_<input>.bin.
#include "rank_agreement.h"
#include "peer_run.h"
#include "raw_files.h"

#include <nnx/nnx.h>

#include <torch/types.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace {

using nlohmann::json;
using nnx::Array;
using nnx::none;
using nnx::SpecEntry;
using nnx_peers::agreed_on_every_rank;
using nnx_peers::read_raw;
using nnx_peers::write_raw;

// The inputs, as parameters so that value_and_grad differentiates them.
struct Inputs : nnx::Module {
  nnx::Param NNX_FIELD(x);    // [8, 12], quarter values in [-2, 2]: ties everywhere
  nnx::Param NNX_FIELD(y);    // [8, 12], the same kind
  nnx::Param NNX_FIELD(b);    // [12], broadcast along rows
  nnx::Param NNX_FIELD(c);    // [8, 1], broadcast along columns
  nnx::Param NNX_FIELD(pos);  // [8, 12], positive
  nnx::Param NNX_FIELD(xn);   // [8, 12], with NaN, +-inf and -0.0
  nnx::Param NNX_FIELD(w);    // [12, 6]
  nnx::Param NNX_FIELD(scale);  // [12] and [12]: a norm's over x's last dim
  nnx::Param NNX_FIELD(bias);
  nnx::Param NNX_FIELD(q);  // [4, 4, 8, 8]: batch, heads, sequence, head dim
  nnx::Param NNX_FIELD(k);
  nnx::Param NNX_FIELD(v);
  nnx::Param NNX_FIELD(image);   // [2, 6, 6, 3]: NHWC
  nnx::Param NNX_FIELD(kernel);  // [3, 3, 3, 4]: HWIO
  Array ids;                     // [8] int64 rows of w
  Array ids_from_end;            // [8] int64, negative and outside w too
  explicit Inputs(const std::map<std::string, Array>& in)
      : x(in.at("x")), y(in.at("y")), b(in.at("b")), c(in.at("c")), pos(in.at("pos")),
        xn(in.at("xn")), w(in.at("w")), scale(in.at("scale")), bias(in.at("bias")),
        q(in.at("q")), k(in.at("k")), v(in.at("v")), image(in.at("image")),
        kernel(in.at("kernel")), ids(in.at("ids")), ids_from_end(in.at("ids_from_end")) {}
};

using Case = std::function<Array(const Inputs&)>;

// Every case of jnp_ops_peer.py's CASES, by name; the two files list the same names.
const std::map<std::string, Case>& cases() {
  static const std::map<std::string, Case> all{
      // Broadcasting binary ops, and scalars.
      {"add", [](auto& m) { return m.x.value() + m.y.value(); }},
      {"sub_row", [](auto& m) { return m.x.value() - m.b.value(); }},
      {"mul_col", [](auto& m) { return m.x.value() * m.c.value(); }},
      {"div", [](auto& m) { return m.x.value() / m.pos.value(); }},
      {"maximum", [](auto& m) { return nnx::maximum(m.x.value(), m.y.value()); }},
      {"minimum_row", [](auto& m) { return nnx::minimum(m.x.value(), m.b.value()); }},
      {"maximum_nan", [](auto& m) { return nnx::maximum(m.xn.value(), m.y.value()); }},
      {"minimum_nan_row", [](auto& m) { return nnx::minimum(m.xn.value(), m.b.value()); }},
      {"add_scalar", [](auto& m) { return m.x.value() + 1.5; }},
      {"mul_scalar", [](auto& m) { return m.x.value() * -2.0; }},
      // Unary ops.
      {"neg", [](auto& m) { return -m.x.value(); }},
      {"exp", [](auto& m) { return nnx::exp(m.x.value()); }},
      {"log", [](auto& m) { return nnx::log(m.pos.value()); }},
      {"tanh", [](auto& m) { return nnx::tanh(m.x.value()); }},
      {"relu", [](auto& m) { return nnx::relu(m.x.value()); }},
      {"gelu_exact", [](auto& m) { return nnx::gelu(m.x.value(), false); }},
      {"gelu_tanh", [](auto& m) { return nnx::gelu(m.x.value(), true); }},
      {"gelu_default", [](auto& m) { return nnx::gelu(m.x.value()); }},
      {"silu", [](auto& m) { return nnx::silu(m.x.value()); }},
      {"sigmoid", [](auto& m) { return nnx::sigmoid(m.x.value()); }},
      {"square", [](auto& m) { return nnx::square(m.x.value()); }},
      {"rsqrt", [](auto& m) { return nnx::rsqrt(m.pos.value()); }},
      {"sqrt", [](auto& m) { return nnx::sqrt(m.pos.value()); }},
      {"cube", [](auto& m) { return nnx::power(m.x.value(), 3); }},
      {"power_half", [](auto& m) { return nnx::power(m.pos.value(), 0.5); }},
      {"abs", [](auto& m) { return nnx::abs(m.x.value()); }},
      {"sin", [](auto& m) { return nnx::sin(m.x.value()); }},
      {"cos", [](auto& m) { return nnx::cos(m.x.value()); }},
      {"softplus", [](auto& m) { return nnx::softplus(m.x.value()); }},
      {"log_sigmoid", [](auto& m) { return nnx::log_sigmoid(m.x.value()); }},
      {"clip", [](auto& m) { return nnx::clip(m.x.value(), -0.5, 0.5); }},
      {"clip_min", [](auto& m) { return nnx::clip(m.x.value(), 0.25, std::nullopt); }},
      {"clip_max", [](auto& m) { return nnx::clip(m.x.value(), std::nullopt, 1.0); }},
      // Comparisons and masks.
      {"equal", [](auto& m) { return m.x.value() == m.y.value(); }},
      {"not_equal_row", [](auto& m) { return m.x.value() != m.b.value(); }},
      {"less_col", [](auto& m) { return m.x.value() < m.c.value(); }},
      {"less_equal", [](auto& m) { return m.x.value() <= m.y.value(); }},
      {"greater", [](auto& m) { return m.x.value() > m.y.value(); }},
      {"greater_equal_row", [](auto& m) { return m.x.value() >= m.b.value(); }},
      {"greater_nan", [](auto& m) { return m.xn.value() > m.y.value(); }},
      {"equal_zero_nan", [](auto& m) { return m.xn.value() == 0.0; }},
      {"less_equal_one_nan", [](auto& m) { return m.xn.value() <= 1.0; }},
      {"not_equal_self_nan", [](auto& m) { return m.xn.value() != m.xn.value(); }},
      {"logical_and",
       [](auto& m) { return nnx::logical_and(m.x.value() > 0.0, m.y.value() < 0.0); }},
      {"logical_or",
       [](auto& m) {
         return nnx::logical_or(m.x.value() > m.y.value(), nnx::isnan(m.xn.value()));
       }},
      {"logical_not", [](auto& m) { return nnx::logical_not(m.x.value() >= m.b.value()); }},
      {"isfinite", [](auto& m) { return nnx::isfinite(m.xn.value()); }},
      {"isnan", [](auto& m) { return nnx::isnan(m.xn.value()); }},
      // where.
      {"where",
       [](auto& m) { return nnx::where(m.x.value() > m.y.value(), m.x.value(), m.y.value()); }},
      {"where_scalar_y", [](auto& m) { return nnx::where(m.x.value() > 0.0, m.x.value(), 0.0); }},
      {"where_scalar_x",
       [](auto& m) { return nnx::where(m.x.value() < m.b.value(), -1.0, m.y.value()); }},
      {"where_broadcast",
       [](auto& m) { return nnx::where(m.c.value() > 0.0, m.x.value(), m.b.value()); }},
      {"where_nan",
       [](auto& m) { return nnx::where(nnx::isnan(m.xn.value()), 0.0, m.xn.value()); }},
      // Reductions.
      {"sum_all", [](auto& m) { return nnx::sum(m.x.value()); }},
      {"sum0", [](auto& m) { return nnx::sum(m.x.value(), {0}); }},
      {"sum1_keep", [](auto& m) { return nnx::sum(m.x.value(), {1}, true); }},
      {"mean_all", [](auto& m) { return nnx::mean(m.x.value()); }},
      {"mean1", [](auto& m) { return nnx::mean(m.x.value(), {1}); }},
      {"max0", [](auto& m) { return nnx::max(m.x.value(), 0); }},
      {"max1_keep", [](auto& m) { return nnx::max(m.x.value(), 1, true); }},
      {"min1", [](auto& m) { return nnx::min(m.x.value(), 1); }},
      {"argmax0", [](auto& m) { return nnx::argmax(m.x.value(), 0); }},
      {"argmax1", [](auto& m) { return nnx::argmax(m.x.value(), 1); }},
      {"argmin0", [](auto& m) { return nnx::argmin(m.x.value(), 0); }},
      {"argmin1", [](auto& m) { return nnx::argmin(m.x.value(), 1); }},
      {"argmax_nan", [](auto& m) { return nnx::argmax(m.xn.value(), 1); }},
      {"argmin_nan", [](auto& m) { return nnx::argmin(m.xn.value(), 0); }},
      {"max_nan", [](auto& m) { return nnx::max(m.xn.value(), 1); }},
      {"min_nan", [](auto& m) { return nnx::min(m.xn.value(), 0); }},
      {"softmax1", [](auto& m) { return nnx::softmax(m.x.value(), 1); }},
      {"softmax0", [](auto& m) { return nnx::softmax(m.x.value(), 0); }},
      {"log_softmax1", [](auto& m) { return nnx::log_softmax(m.x.value(), 1); }},
      // Shapes and products.
      {"matmul", [](auto& m) { return nnx::matmul(m.x.value(), m.w.value()); }},
      {"matmul_vector_left", [](auto& m) { return nnx::matmul(m.b.value(), m.w.value()); }},
      {"matmul_vector_right", [](auto& m) { return nnx::matmul(m.x.value(), m.b.value()); }},
      {"transpose", [](auto& m) { return nnx::transpose(m.x.value(), 0, 1); }},
      {"reshape", [](auto& m) { return nnx::reshape(m.x.value(), {4, 24}); }},
      {"flatten", [](auto& m) { return nnx::flatten(m.x.value()); }},
      {"concatenate0", [](auto& m) { return nnx::concatenate({m.x.value(), m.y.value()}, 0); }},
      {"concatenate1", [](auto& m) { return nnx::concatenate({m.x.value(), m.y.value()}, 1); }},
      {"slice", [](auto& m) { return nnx::slice(m.x.value(), 1, 2, 10); }},
      {"select", [](auto& m) { return nnx::select(m.x.value(), 0, 3); }},
      // Chains, where a pending sum of the product (a split inner dim) flows into the next op.
      {"matmul_softmax",
       [](auto& m) { return nnx::softmax(nnx::matmul(m.x.value(), m.w.value()), 1); }},
      {"matmul_relu_max",
       [](auto& m) { return nnx::max(nnx::relu(nnx::matmul(m.x.value(), m.w.value())), 0); }},
      // Layers' math.
      {"layer_norm",
       [](auto& m) { return nnx::layer_norm(m.x.value(), m.scale.value(), m.bias.value()); }},
      {"rms_norm", [](auto& m) { return nnx::rms_norm(m.x.value(), m.scale.value()); }},
      {"attention",
       [](auto& m) { return nnx::dot_product_attention(m.q.value(), m.k.value(), m.v.value()); }},
      {"attention_causal",
       [](auto& m) {
         return nnx::dot_product_attention(m.q.value(), m.k.value(), m.v.value(), true);
       }},
      {"embedding_lookup", [](auto& m) { return nnx::embedding_lookup(m.w.value(), m.ids); }},
      {"embedding_lookup_from_end",
       [](auto& m) { return nnx::embedding_lookup(m.w.value(), m.ids_from_end); }},
      {"conv_same", [](auto& m) { return nnx::conv2d(m.image.value(), m.kernel.value()); }},
      {"conv_valid_stride2",
       [](auto& m) {
         return nnx::conv2d(m.image.value(), m.kernel.value(), {2, 2}, "VALID");
       }},
  };
  return all;
}

// Per round, the specs of inputs of 1, 2 and 4 dims; a dim its axes do not divide stays whole.
struct Round {
  std::vector<SpecEntry> one, two, four;
};
const std::vector<Round> kRounds{
    {{"a"}, {"a", "b"}, {"a", "b", none, none}},
    {{"b"}, {"b", "a"}, {"b", none, "a", none}},
    {{none}, {none, "a"}, {none, "a", none, "b"}},
    {{{"a", "b"}}, {{"a", "b"}, none}, {{"a", "b"}, none, none, none}},
    {{}, {}, {}},
    {{{"b", "a"}}, {none, {"b", "a"}}, {none, {"b", "a"}, none, none}},
};

nnx::PartitionSpec spec_for(const std::vector<SpecEntry>& round, const std::vector<int64_t>& shape,
                            const nnx::Mesh& mesh) {
  std::vector<SpecEntry> entries;
  for (size_t d = 0; d < round.size() && d < shape.size(); ++d) {
    int64_t split = 1;
    for (const auto& axis : round[d].names()) split *= mesh.axis_size(axis);
    entries.push_back(shape[d] % split == 0 ? round[d] : SpecEntry());
  }
  return nnx::PartitionSpec(entries);
}

}  // namespace

int main(int argc, char** argv) {
  const auto run = nnx_peers::read_peer_run(argc, argv, "jnp_ops_values");
  if (!run) return 2;
  const auto& [dir, tag, spec] = *run;
  const int n = nnx::world_size();
  auto mesh = nnx::make_mesh({n >= 4 ? 2 : 1, n >= 4 ? n / 2 : n}, {"a", "b"});
  for (size_t round = 0; round < kRounds.size(); ++round) {
    std::map<std::string, Array> placed;
    for (const auto& [name, in] : spec["inputs"].items()) {
      const auto shape = in["shape"].get<std::vector<int64_t>>();
      const Round& r = kRounds[round];
      const auto& entries = shape.size() == 1 ? r.one : shape.size() == 2 ? r.two : r.four;
      const auto dtype = in["dtype"] == "int64" ? torch::kLong : torch::kFloat;
      placed[name] = nnx::device_put(read_raw(dir + "/" + name + ".bin", shape, dtype),
                                     {mesh, spec_for(entries, shape, *mesh)});
    }
    Inputs inputs(placed);
    for (const auto& [name, grad_names] : spec["cases"].items()) {
      const Case& fn = cases().at(name);
      const std::string prefix = fmt::format("{}/{}_{}_{}", dir, tag, round, name);
      Array value;
      if (grad_names.empty()) {
        value = fn(inputs);
      } else {
        std::vector<nnx::Filter> wrt;
        for (const auto& input : grad_names) wrt.push_back(nnx::PathContains(input));
        const json& linear_cases = spec["linear_loss"];
        const bool linear = std::find(linear_cases.begin(), linear_cases.end(), name) !=
                            linear_cases.end();
        auto [loss, grads] = nnx::value_and_grad(
            [&](Inputs& m) {
              value = fn(m);
              if (linear) return nnx::sum(value);
              return nnx::sum(nnx::square(value)) * 0.5 + nnx::sum(value) * 0.375;
            },
            inputs, {.wrt = nnx::any_of(wrt)});
        for (const auto& input : grad_names) {
          const at::Tensor grad = agreed_on_every_rank(
              nnx::gather(grads[input.get<std::string>()].value()), prefix + " grad");
          const std::string path = prefix + "_grad_" + input.get<std::string>() + ".bin";
          if (nnx::world_rank() == 0) write_raw(path, grad);
        }
      }
      const at::Tensor whole = agreed_on_every_rank(nnx::gather(value), prefix + " value");
      if (nnx::world_rank() == 0) write_raw(prefix + "_value.bin", whole.detach());
    }
  }
  return 0;
}
