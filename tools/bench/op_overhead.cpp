// Op overhead on one process: each nnx op on Arrays (plain, and on a one-process mesh where the
// sharding rules run) against the same LibTorch calls on tensors. Prints one JSON line per op:
// medians of many calls (the three alternating in rounds) and the ratios nnx / torch.
// Usage: bench_op_overhead [reps=2000] [prefix of op and shape: "matmul", "add[16"]
#include <nnx/nnx.h>

#include <torch/torch.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <string>

namespace {

struct Case {
  std::string op;
  std::string shape;
  std::function<at::Tensor()> torch_call;
  std::function<nnx::Array()> plain_call;
  std::function<nnx::Array()> mesh_call;
};

// Seconds per call of each of `calls`, median over `reps` calls each. The calls alternate in
// rounds of 50, so a change in the machine's speed during the run touches all of them alike.
template <class... Calls>
std::array<double, sizeof...(Calls)> interleaved_medians(int reps, const Calls&... calls) {
  constexpr int kRound = 50;
  std::array<std::vector<double>, sizeof...(Calls)> times;
  auto time_round = [&](size_t i, const auto& call, bool keep) {
    for (int r = 0; r < kRound; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      call();
      auto t1 = std::chrono::steady_clock::now();
      if (keep) times[i].push_back(std::chrono::duration<double>(t1 - t0).count());
    }
  };
  for (int round = -1; round < std::max(1, reps / kRound); ++round) {  // round -1 warms up
    size_t i = 0;
    (time_round(i++, calls, round >= 0), ...);
  }
  std::array<double, sizeof...(Calls)> out{};
  for (size_t i = 0; i < out.size(); ++i) {
    auto& t = times[i];
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    out[i] = t[t.size() / 2];
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::stoi(argv[1]) : 2000;
  const std::string only = argc > 2 ? argv[2] : "";  // run the ops whose name starts so
  torch::NoGradGuard no_grad;
  at::set_num_threads(1);
  auto mesh = nnx::make_mesh({nnx::world_size()}, {"x"});
  auto on_mesh = [&](const at::Tensor& t) { return nnx::device_put(t, {mesh, nnx::P()}); };
  std::vector<Case> cases;
  for (int64_t n : {16, 256}) {
    auto a = torch::randn({n, n}), b = torch::randn({n, n}), v = torch::randn({n});
    auto pa = nnx::Array(a), pb = nnx::Array(b), pv = nnx::Array(v);
    auto ma = on_mesh(a), mb = on_mesh(b), mv = on_mesh(v);
    std::string shape = fmt::format("[{},{}]", n, n);
    cases.push_back({"add", shape, [=] { return a + b; }, [=] { return pa + pb; },
                     [=] { return ma + mb; }});
    cases.push_back({"add_broadcast", shape, [=] { return a + v; }, [=] { return pa + pv; },
                     [=] { return ma + mv; }});
    cases.push_back({"relu", shape, [=] { return a.relu(); }, [=] { return nnx::relu(pa); },
                     [=] { return nnx::relu(ma); }});
    cases.push_back({"abs", shape, [=] { return a.abs(); }, [=] { return nnx::abs(pa); },
                     [=] { return nnx::abs(ma); }});
    cases.push_back({"clip", shape, [=] { return a.clamp(-0.5, 0.5); },
                     [=] { return nnx::clip(pa, -0.5, 0.5); },
                     [=] { return nnx::clip(ma, -0.5, 0.5); }});
    cases.push_back({"matmul", shape, [=] { return a.matmul(b); },
                     [=] { return nnx::matmul(pa, pb); }, [=] { return nnx::matmul(ma, mb); }});
    cases.push_back({"softmax", shape, [=] { return a.softmax(-1); },
                     [=] { return nnx::softmax(pa); }, [=] { return nnx::softmax(ma); }});
    cases.push_back({"sum_dim0", shape, [=] { return a.sum(0); },
                     [=] { return nnx::sum(pa, {0}); }, [=] { return nnx::sum(ma, {0}); }});
    cases.push_back({"layer_norm", shape,
                     [=] {
                       auto mu = a.mean(-1, true);
                       auto var = ((a * a).mean(-1, true) - mu * mu).clamp_min(0);
                       return (a - mu) * (var + 1e-6).rsqrt() * v + v;
                     },
                     [=] { return nnx::layer_norm(pa, pv, pv); },
                     [=] { return nnx::layer_norm(ma, mv, mv); }});
    auto mask = a > 0;
    auto pmask = nnx::Array(mask), mmask = on_mesh(mask);
    cases.push_back({"greater", shape, [=] { return a > b; }, [=] { return pa > pb; },
                     [=] { return ma > mb; }});
    cases.push_back({"where", shape, [=] { return torch::where(mask, a, b); },
                     [=] { return nnx::where(pmask, pa, pb); },
                     [=] { return nnx::where(mmask, ma, mb); }});
    // Through the op planners: a split over 'x' is not replicated, even on a one-process axis.
    auto sa = nnx::device_put(a, {mesh, nnx::P("x", nnx::none)});
    cases.push_back({"matmul_planned", shape, [=] { return a.matmul(b); },
                     [=] { return nnx::matmul(pa, pb); }, [=] { return nnx::matmul(sa, mb); }});
    cases.push_back({"add_broadcast_planned", shape, [=] { return a + v; },
                     [=] { return pa + pv; }, [=] { return sa + mv; }});
    cases.push_back({"add_sliced_planned", shape, [=] { return a + b; },
                     [=] { return pa + pb; }, [=] { return sa + mb; }});
    cases.push_back({"where_planned", shape, [=] { return torch::where(mask, a, v); },
                     [=] { return nnx::where(pmask, pa, pv); },
                     [=] { return nnx::where(mmask, sa, mv); }});
    cases.push_back({"sum_dim0_planned", shape, [=] { return a.sum(0); },
                     [=] { return nnx::sum(pa, {0}); }, [=] { return nnx::sum(sa, {0}); }});
  }
  for (const auto& c : cases) {
    if (!(c.op + c.shape).starts_with(only)) continue;
    const auto [t_torch, t_plain, t_mesh] =
        interleaved_medians(reps, c.torch_call, c.plain_call, c.mesh_call);
    if (nnx::world_rank() == 0)
      fmt::print(
          "{{\"bench\": \"op_overhead\", \"op\": \"{}\", \"shape\": \"{}\", \"reps\": {}, "
          "\"torch_us\": {:.2f}, \"nnx_plain_us\": {:.2f}, \"nnx_mesh_us\": {:.2f}, "
          "\"ratio_plain\": {:.3f}, \"ratio_mesh\": {:.3f}}}\n",
          c.op, c.shape, reps, t_torch * 1e6, t_plain * 1e6, t_mesh * 1e6, t_plain / t_torch,
          t_mesh / t_torch);
  }
  return 0;
}
