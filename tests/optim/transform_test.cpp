// Optimizers and schedules against hand computations of optax's formulas.
#include "../catch_after_torch.h"

#include <nnx/nnx.h>

#include <torch/types.h>

#include <cmath>
#include <string>
#include <vector>

using Catch::Matchers::Contains;
namespace optim = nnx::optim;

namespace {

struct Pair : nnx::Module {
  nnx::Param NNX_FIELD(w);
  nnx::Param NNX_FIELD(b);
  Pair(double w0, double b0)
      : w(torch::full({1}, w0, torch::kDouble)), b(torch::full({1}, b0, torch::kDouble)) {}
  double wv() const { return w.tensor().item<double>(); }
  double bv() const { return b.tensor().item<double>(); }
};

nnx::State grads_of(double gw, double gb) {
  nnx::State g;
  g.add("w", nnx::Param(torch::full({1}, gw, torch::kDouble)));
  g.add("b", nnx::Param(torch::full({1}, gb, torch::kDouble)));
  return g;
}

}  // namespace

TEST_CASE("sgd with and without momentum follows optax.sgd") {
  Pair plain(1.0, 2.0);
  optim::Optimizer opt(plain, optim::sgd(0.1));
  opt.update(plain, grads_of(0.5, -1.0));
  CHECK(plain.wv() == Approx(1.0 - 0.1 * 0.5));
  CHECK(plain.bv() == Approx(2.0 + 0.1));
  CHECK(opt.step() == 1);

  Pair heavy(1.0, 0.0), nesterov(1.0, 0.0);
  optim::Optimizer om(heavy, optim::sgd(0.1, 0.9)), on(nesterov, optim::sgd(0.1, 0.9, true));
  double t = 0, w = 1.0, wn = 1.0, tn = 0;
  for (double g : {0.5, 0.25, -1.0}) {
    om.update(heavy, grads_of(g, 0));
    on.update(nesterov, grads_of(g, 0));
    t = g + 0.9 * t;
    w -= 0.1 * t;
    tn = g + 0.9 * tn;
    wn -= 0.1 * (g + 0.9 * tn);
  }
  CHECK(heavy.wv() == Approx(w).epsilon(1e-12));
  CHECK(nesterov.wv() == Approx(wn).epsilon(1e-12));
}

TEST_CASE("adam and adamw follow optax's bias-corrected moments") {
  Pair a(1.0, 1.0), aw(1.0, 1.0);
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
  optim::Optimizer oa(a, optim::adam(lr));
  optim::Optimizer ow(aw, optim::adamw(lr, b1, b2, eps, wd, nnx::PathContains("w")));
  double mu = 0, nu = 0, w = 1.0, ww = 1.0, bw = 1.0, mw = 0, nw = 0, mb = 0, nb = 0;
  int step = 0;
  for (double g : {0.3, -0.2, 0.05}) {
    oa.update(a, grads_of(g, g));
    ow.update(aw, grads_of(g, g));
    ++step;
    mu = b1 * mu + (1 - b1) * g;
    nu = b2 * nu + (1 - b2) * g * g;
    const double c1 = 1 - std::pow(b1, step), c2 = 1 - std::pow(b2, step);
    w -= lr * (mu / c1) / (std::sqrt(nu / c2) + eps);
    mw = mu, nw = nu, mb = mu, nb = nu;
    ww -= lr * ((mw / c1) / (std::sqrt(nw / c2) + eps) + wd * ww);  // decay on w only
    bw -= lr * ((mb / c1) / (std::sqrt(nb / c2) + eps));
  }
  CHECK(a.wv() == Approx(w).epsilon(1e-12));
  CHECK(aw.wv() == Approx(ww).epsilon(1e-12));
  CHECK(aw.bv() == Approx(bw).epsilon(1e-12));
  CHECK(oa.opt_state().inner[0].slots.size() == 2);
  CHECK(oa.opt_state().inner[0].slots[0]["w"].is<nnx::OptState>());
}

TEST_CASE("lion and rmsprop follow their formulas") {
  Pair l(1.0, 1.0), r(1.0, 1.0);
  optim::Optimizer ol(l, optim::lion(0.1, 0.9, 0.99, 0.0)), orr(r, optim::rmsprop(0.1));
  double mu = 0, w = 1.0, nu = 0, wr = 1.0;
  for (double g : {0.3, -0.5}) {
    ol.update(l, grads_of(g, g));
    orr.update(r, grads_of(g, g));
    double dir = (1 - 0.9) * g + 0.9 * mu;
    w -= 0.1 * (dir > 0 ? 1 : -1);
    mu = (1 - 0.99) * g + 0.99 * mu;
    nu = 0.1 * g * g + 0.9 * nu;
    wr -= 0.1 * g / std::sqrt(nu + 1e-8);
  }
  CHECK(l.wv() == Approx(w).epsilon(1e-12));
  CHECK(r.wv() == Approx(wr).epsilon(1e-12));
}

TEST_CASE("clip_by_global_norm scales all updates together") {
  Pair p(0.0, 0.0);
  optim::Optimizer opt(p, optim::chain({optim::clip_by_global_norm(1.0), optim::sgd(1.0)}));
  opt.update(p, grads_of(3.0, 4.0));  // norm 5 -> scaled to norm 1
  CHECK(p.wv() == Approx(-0.6));
  CHECK(p.bv() == Approx(-0.8));
  opt.update(p, grads_of(0.3, 0.4));  // norm 0.5 < 1: unchanged
  CHECK(p.wv() == Approx(-0.9));
  CHECK(optim::global_norm(grads_of(3.0, 4.0)) == Approx(5.0));
}

TEST_CASE("gradients in another order than the parameters update each its own parameter") {
  for (bool fused : {true, false}) {
    INFO((fused ? "fused pass" : "tensor ops"));
    Pair in_order(1.0, 2.0), reversed(1.0, 2.0);
    auto make = [&] {
      auto tx = optim::adam(0.1);
      if (!fused) tx.fused = nullptr;
      return tx;
    };
    optim::Optimizer a(in_order, make()), b(reversed, make());
    nnx::State backwards;  // b, then w
    backwards.add("b", nnx::Param(torch::full({1}, -4.0, torch::kDouble)));
    backwards.add("w", nnx::Param(torch::full({1}, 3.0, torch::kDouble)));
    a.update(in_order, grads_of(3.0, -4.0));
    b.update(reversed, backwards);
    CHECK(in_order.wv() == Approx(0.9).epsilon(1e-9));  // Adam's first step: -lr * sign
    CHECK(in_order.bv() == Approx(2.1).epsilon(1e-9));
    CHECK(reversed.wv() == in_order.wv());
    CHECK(reversed.bv() == in_order.bv());
  }
}

TEST_CASE("schedules follow optax's formulas") {
  auto linear = optim::linear_schedule(1.0, 0.0, 10, 5);
  CHECK(linear(0) == Approx(1.0));
  CHECK(linear(10) == Approx(0.5));
  CHECK(linear(20) == Approx(0.0));
  auto cosine = optim::cosine_decay_schedule(2.0, 100, 0.1);
  CHECK(cosine(0) == Approx(2.0));
  CHECK(cosine(50) == Approx(2.0 * (0.9 * 0.5 + 0.1)));
  CHECK(cosine(200) == Approx(0.2));
  auto warm = optim::warmup_cosine_decay_schedule(0.0, 1.0, 10, 110, 0.1);
  CHECK(warm(5) == Approx(0.5));
  CHECK(warm(10) == Approx(1.0));
  CHECK(warm(60) == Approx(0.9 * 0.5 + 0.1));
  CHECK(warm(110) == Approx(0.1));
  auto piecewise = optim::piecewise_constant_schedule(1.0, {{10, 0.5}, {20, 0.1}});
  CHECK(piecewise(9) == Approx(1.0));
  CHECK(piecewise(10) == Approx(0.5));
  CHECK(piecewise(25) == Approx(0.05));
  Pair p(0.0, 0.0);
  optim::Optimizer opt(p, optim::sgd(optim::piecewise_constant_schedule(1.0, {{1, 0.5}})));
  opt.update(p, grads_of(1.0, 0.0));
  opt.update(p, grads_of(1.0, 0.0));
  CHECK(p.wv() == Approx(-1.5));
}

TEST_CASE("updates that do not match the parameters are errors naming the path") {
  Pair p(0.0, 0.0);
  optim::Optimizer opt(p, optim::adam(0.1));
  nnx::State wrong;
  wrong.add("w", nnx::Param(torch::zeros({1}, torch::kDouble)));
  CHECK_THROWS_WITH(opt.update(p, wrong), Contains("1 updates for 2 parameters"));
}

TEST_CASE("a transformation given a state its init did not make for these parameters refuses it") {
  nnx::State only_w;
  only_w.add("w", nnx::Param(torch::zeros({1}, torch::kDouble)));
  const nnx::State both = grads_of(0.0, 0.0);
  auto adam = optim::adam(0.1);
  optim::TxState for_w = adam.init(only_w);
  nnx::State updates = grads_of(1.0, 1.0);
  CHECK_THROWS_WITH(adam.update(updates, for_w, both),
                    Contains("[scale_by_adam]") && Contains("slot 'mu' holds 1 variables for 2") &&
                        Contains("pass the state that this transformation's init made"));
  // The state of another transformation: sgd's one inner state where adam's chain has two.
  optim::TxState of_sgd = optim::sgd(0.1).init(both);
  CHECK_THROWS_WITH(adam.update(updates, of_sgd, both), Contains("inner states for"));
  // Same count, another path or shape.
  nnx::State renamed;
  renamed.add("v", nnx::Param(torch::zeros({1}, torch::kDouble)));
  renamed.add("b", nnx::Param(torch::zeros({1}, torch::kDouble)));
  auto lion = optim::scale_by_lion(0.9, 0.99);
  optim::TxState for_renamed = lion.init(renamed);
  CHECK_THROWS_WITH(lion.update(updates, for_renamed, both),
                    Contains("holds 'v' of shape (1) where parameter 'w' of shape (1)"));
  nnx::State wider;
  wider.add("w", nnx::Param(torch::zeros({3}, torch::kDouble)));
  wider.add("b", nnx::Param(torch::zeros({1}, torch::kDouble)));
  optim::TxState for_wider = optim::trace(0.9).init(wider);
  CHECK_THROWS_WITH(optim::trace(0.9).update(updates, for_wider, both),
                    Contains("holds 'w' of shape (3) where parameter 'w' of shape (1)"));
  // A counted transformation given a state without a count.
  optim::TxState uncounted;
  CHECK_THROWS_WITH(optim::scale_by_schedule(optim::constant_schedule(1.0))
                        .update(updates, uncounted, both),
                    Contains("has no step count"));
  // The state its init made works.
  optim::TxState right = adam.init(both);
  adam.update(updates, right, both);
  CHECK(updates["w"].tensor().item<double>() == Approx(-0.1));
}

TEST_CASE("schedules that would ascend, and empty ones, are refused when built") {
  CHECK_THROWS_WITH(optim::piecewise_constant_schedule(1.0, {{100, -0.1}}),
                    Contains("scale at boundary 100 is -0.1") && Contains("must not be negative"));
  CHECK_THROWS_WITH(optim::piecewise_constant_schedule(1.0, {{5, std::nan("")}}),
                    Contains("scale at boundary 5 is nan"));
  CHECK_THROWS_WITH(optim::adam(optim::Schedule{}),
                    Contains("the learning rate is an empty schedule"));
  CHECK_THROWS_WITH(optim::scale_by_schedule(optim::Schedule{}), Contains("the schedule is empty"));
  CHECK(optim::piecewise_constant_schedule(1.0, {{5, 0.0}})(5) == 0.0);  // zero stops, as optax
}

TEST_CASE("global_norm is exact for sharded gradients", "[ranks2][ranks4][ranks8]") {
  auto mesh = nnx::make_mesh({nnx::world_size()}, {"x"});
  auto full = torch::arange(8.0 * nnx::world_size(), torch::kDouble).reshape({nnx::world_size(), 8});
  nnx::State g;
  g.add("sharded", nnx::Param(nnx::device_put(full, {mesh, nnx::P("x", nnx::none)})));
  g.add("replicated", nnx::Param(nnx::device_put(full, {mesh, nnx::P()})));
  CHECK(optim::global_norm(g) == Approx(std::sqrt(2 * full.pow(2).sum().item<double>())));
}

TEST_CASE("global_norm on a GPU equals the CPU's: exact for integers, to rounding else", "[gpu]") {
  if (nnx::cuda_device_count() == 0) {
    WARN("no CUDA device: skipped");
    return;
  }
  const c10::Device cuda(torch::kCUDA, 0);
  torch::manual_seed(3);
  const std::vector<std::vector<int64_t>> shapes{{300, 70}, {70}, {0}, {3, 5, 2}, {4097}};
  for (auto dtype : {torch::kFloat, torch::kDouble})
    for (bool integers : {true, false}) {
      INFO(c10::toString(dtype) << (integers ? ", integers" : ", random"));
      nnx::State on_gpu, on_cpu, mixed;
      double reference = 0;  // in double on the CPU
      for (size_t k = 0; k < shapes.size(); ++k) {
        auto t = torch::randn(shapes[k], torch::TensorOptions(dtype)) * 4;
        if (integers) t = t.round();  // every sum of squares exact
        reference += t.to(torch::kDouble).square().sum().item<double>();
        const std::string path(1, static_cast<char>('a' + k));
        on_gpu.add(path, nnx::Param(t.to(cuda)));
        on_cpu.add(path, nnx::Param(t));
        // One block on the CPU: the blocks one at a time.
        mixed.add(path, nnx::Param(k == 1 ? t : t.to(cuda)));
      }
      reference = std::sqrt(reference);
      const double gpu = optim::global_norm(on_gpu), cpu = optim::global_norm(on_cpu);
      const double ulp = dtype == torch::kFloat ? 1.1920929e-7 : 2.220446049250313e-16;
      if (integers) CHECK(gpu == cpu);
      CHECK(std::abs(gpu - reference) <= 64 * ulp * reference);
      CHECK(std::abs(cpu - reference) <= 64 * ulp * reference);
      CHECK(std::abs(optim::global_norm(mixed) - reference) <= 64 * ulp * reference);
    }
}
