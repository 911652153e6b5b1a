// The seed walk through distributed JAX (meshes, sharded matmul, shard_map, collectives) in
// nnx. Run on 8 ranks: mpirun -np 8 --oversubscribe build/examples/collectives
// (2, 4, 8 or any power of two: the examples' sizes split evenly; rank 0 prints).
#include <nnx/nnx.h>

#include <torch/torch.h>

#include <iostream>

namespace {
bool root() { return nnx::world_rank() == 0; }
void say(const std::string& text) {
  if (root()) std::cout << text << std::flush;
}
std::string str(const at::Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}
}  // namespace

int main() {
  const int64_t n = nnx::world_size();
  if (n < 2 || (n & (n - 1)) != 0) {
    say("run with a power of two of ranks (2, 4, 8, ...), e.g. mpirun -np 8 --oversubscribe\n");
    return 1;
  }

  // Single-axis mesh: an array split over every process; tanh keeps the sharding.
  auto line = nnx::make_mesh({n}, {"i"});
  auto a = nnx::device_put(torch::arange(n, torch::kFloat), {line, nnx::P("i")});
  say("a = arange(" + std::to_string(n) + ") sharded over 'i':\n" + nnx::visualize_sharding(a));
  say("tanh(a) keeps it:\n" + nnx::visualize_sharding(nnx::tanh(a)));

  // Two-axis mesh: y = x @ w + b with x split by rows and w, b by columns.
  auto mesh = nnx::make_mesh({n / 2, 2}, {"i", "j"});
  const int64_t batch = 8 * n, din = 64, dout = 128;
  auto x = nnx::random::normal(nnx::random::key(0), {batch, din});
  auto w = nnx::random::normal(nnx::random::key(1), {din, dout});
  auto b = nnx::random::normal(nnx::random::key(2), {dout});
  auto xs = nnx::device_put(x, {mesh, nnx::P("i", nnx::none)});
  auto ws = nnx::device_put(w, {mesh, nnx::P(nnx::none, "j")});
  auto bs = nnx::device_put(b, {mesh, nnx::P("j")});
  auto out = nnx::matmul(xs, ws) + bs;
  say("x @ w + b, x rows over 'i', w and b columns over 'j':\n" + nnx::visualize_sharding(out));
  bool same = torch::allclose(nnx::gather(out), x.matmul(w) + b, 1e-5, 1e-5);
  say(std::string("  equals the one-device result: ") + (same ? "yes\n" : "NO\n"));

  // shard_map: the same product written per block.
  auto matmul_sharded = nnx::shard_map(
      [](at::Tensor x, at::Tensor w, at::Tensor b) { return x.matmul(w) + b; }, mesh,
      {nnx::P("i", nnx::none), nnx::P(nnx::none, "j"), nnx::P("j")}, nnx::P("i", "j"));
  auto y = matmul_sharded(x, w, b);
  same = same && torch::allclose(nnx::gather(y), x.matmul(w) + b, 1e-5, 1e-5);
  say("shard_map matmul:\n" + nnx::visualize_sharding(y));

  // Parallel normalize: statistics across 'j' with pmean.
  auto normalize = nnx::shard_map(
      [](at::Tensor x) {
        auto mean = nnx::pmean(x, "j");
        auto std = nnx::pmean((x - mean) * (x - mean), "j").sqrt();
        return (x - mean) / std;
      },
      mesh, {nnx::P("i", "j")}, nnx::P("i", "j"));
  auto normalized = nnx::gather(normalize(x));
  say("parallel normalize: mean " + std::to_string(normalized.mean().item<float>()) + ", std " +
      std::to_string(normalized.std(false).item<float>()) + "\n");

  // Weight gather: each block of rows of w is pulled from its neighbours.
  auto gather_weight = nnx::shard_map(
      [](at::Tensor x, at::Tensor w) { return x.matmul(nnx::all_gather(w, "i", 0, true)); }, mesh,
      {nnx::P("i", nnx::none), nnx::P("i", nnx::none)}, nnx::P("i", nnx::none));
  same = same && torch::allclose(nnx::gather(gather_weight(x, w)), x.matmul(w), 1e-5, 1e-5);
  say(std::string("matmul with weight gather equals x @ w: ") + (same ? "yes\n" : "NO\n"));

  // Scatter sum over dim 1 on a 4x4 example (rows split over a 4-way axis).
  if (n >= 4) {
    auto quad = nnx::make_mesh({4, n / 4}, {"i", "j"});
    auto ex = torch::tensor({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2}, torch::kFloat).reshape({4, 4});
    auto scatter = nnx::shard_map([](at::Tensor v) { return nnx::psum_scatter(v, "i", 1, true); },
                                  quad, {nnx::P("i", nnx::none)}, nnx::P("i", nnx::none));
    say("psum_scatter over 'i' along dim 1:\n" + str(nnx::gather(scatter(ex))) + "\n");
  }

  // Ring ppermute: each value moves to the next index along 'i'.
  auto ring = nnx::shard_map(
      [](at::Tensor v) {
        const int size = static_cast<int>(nnx::axis_size("i"));
        std::vector<std::pair<int, int>> perm;
        for (int i = 0; i < size; ++i) perm.emplace_back(i, (i + 1) % size);
        return nnx::ppermute(v, "i", perm);
      },
      line, {nnx::P("i")}, nnx::P("i"));
  say("ppermute ring of arange: " + str(nnx::gather(ring(torch::arange(n, torch::kFloat))).unsqueeze(0)) + "\n");

  // axis_index on each device, and one RNG key per index along 'i'.
  auto index = nnx::shard_map(
      []() {
        return torch::tensor({nnx::axis_index("i"), nnx::axis_index("j")}, torch::kLong).unsqueeze(0);
      },
      mesh, {}, nnx::P({"i", "j"}));
  auto indices = nnx::gather(index());
  auto keys = nnx::shard_map(
      []() {
        auto k = nnx::fold_in_axis(nnx::random::key(0), "i");
        return torch::tensor({int64_t(k.words[0]), int64_t(k.words[1])}, torch::kLong).unsqueeze(0);
      },
      mesh, {}, nnx::P({"i", "j"}));
  auto all_keys = nnx::gather(keys());
  for (int64_t r = 0; r < n; ++r)
    say("device " + std::to_string(r) + ": i=" + std::to_string(indices[r][0].item<int64_t>()) +
        " j=" + std::to_string(indices[r][1].item<int64_t>()) + " key=[" +
        std::to_string(all_keys[r][0].item<int64_t>()) + ", " +
        std::to_string(all_keys[r][1].item<int64_t>()) + "]\n");
  return same ? 0 : 1;
}
