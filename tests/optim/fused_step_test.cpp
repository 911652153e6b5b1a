// Optimizer::update runs the built-in transformations as one fused pass; its values equal the
// transformations' own `update` (tensor ops, then params += updates) in float32, float64,
// bfloat16 and, on CPUs with AVX2 and F16C, float16 over several steps: bit for bit, except where
// a square root is taken in float32 and float64 (Adam, RMSProp). LibTorch's CPU sqrt is a last bit
// off for about 1 in 150 elements; the fused loop's is correctly rounded, as XLA's (optax's
// values: tests/peers/optax_peer.py). Chains the pass cannot take fall back, as float16 does
// elsewhere.
#include "../catch_after_torch.h"

#include <nnx/nnx.h>
#include <nnx/optim/detail/fused_stage.h>

#include <ATen/Parallel.h>
#include <torch/types.h>
#include <torch/utils.h>

#include "optim_test_models.h"

#include <functional>
#include <string>
#include <vector>

namespace optim = nnx::optim;

namespace {

using nnx_test::Three;

// One parameter of 100,003 elements: with 2 or more threads, split at an offset that is not a
// multiple of 8.
struct Long : nnx::Module {
  nnx::Param NNX_FIELD(kernel);
  explicit Long(at::ScalarType dtype)
      : kernel(torch::randn({100003}, torch::TensorOptions(dtype))) {}
};

nnx::State grads_for(const nnx::Module& m, int step, double scale = 1) {
  nnx::State g;
  for (const auto& [path, p] : nnx::state(m))
    g.add(path, nnx::Param(torch::randn_like(p.tensor()) * ((step + 1) * scale)));
  return g;
}

// The same transformation with no fused form: Optimizer takes `update`.
optim::GradientTransformation unfused(optim::GradientTransformation tx) {
  tx.fused = nullptr;
  return tx;
}

// The largest magnitude of t's finite values.
double finite_max_abs(const at::Tensor& t) {
  const at::Tensor finite = t.to(torch::kDouble).masked_select(torch::isfinite(t));
  return finite.numel() > 0 ? finite.abs().max().item<double>() : 0.0;
}

// a == b, NaNs at the same places, or within 2 ulp of b plus 2 ulp of `scale` when the
// transformation takes a sqrt. There the infinities and NaNs must be b's, at the same places:
// Adam with eps 1e-8 divides by zero in float16 where a second moment underflows, and both
// paths must overflow alike.
bool same_values(const at::Tensor& a, const at::Tensor& b, bool sqrt, double scale) {
  if (!a.is_floating_point()) return torch::equal(a, b);
  if (!sqrt) {
    const at::Tensor nan = torch::isnan(b);
    return torch::equal(torch::isnan(a), nan) &&
           torch::equal(a.masked_select(~nan), b.masked_select(~nan));
  }
  const at::Tensor wa = a.to(torch::kDouble), wb = b.to(torch::kDouble);
  const at::Tensor finite = torch::isfinite(wb), inf = torch::isinf(wb);
  if (!torch::equal(torch::isfinite(wa), finite) || !torch::equal(torch::isnan(wa), torch::isnan(wb)) ||
      !torch::equal(wa.masked_select(inf), wb.masked_select(inf)))
    return false;
  double eps = 0;
  switch (a.scalar_type()) {
    case torch::kDouble: eps = 2.220446049250313e-16; break;
    case torch::kFloat: eps = 1.1920929e-7; break;
    case torch::kBFloat16: eps = 0.0078125; break;
    case torch::kHalf: eps = 0.0009765625; break;
    default: FAIL("no ulp for " << c10::toString(a.scalar_type()));
  }
  const at::Tensor bound = 2 * eps * (wb.abs() + scale);
  return ((wa - wb).abs() <= bound).masked_select(finite).all().item<bool>();
}

// Trains two copies of a Model, fused and not, on the same gradients; every parameter and state
// value equal. `fused_pass`: whether the first copy must go through the fused pass (else not).
template <class Model = Three>
void check_same(const std::string& name, const std::function<optim::GradientTransformation()>& make,
                at::ScalarType dtype, bool sqrt = false, bool fused_pass = true,
                double gradient_scale = 1) {
  INFO(name << " in " << c10::toString(dtype));
  torch::manual_seed(3);
  Model a(dtype);
  Model b = nnx::clone(a), initial = nnx::clone(a);
  optim::Optimizer fused(a, make()), reference(b, unfused(make()));
  const int64_t runs_before = optim::detail::fused_pass_runs();
  for (int step = 0; step < 5; ++step) {
    nnx::State g = grads_for(a, step, gradient_scale);
    fused.update(a, g);
    reference.update(b, g);
  }
  // One pass per parameter a step, and none through the pass for the reference.
  const int64_t runs = optim::detail::fused_pass_runs() - runs_before;
  CHECK(runs == (fused_pass ? 5 * static_cast<int64_t>(nnx::state(a).size()) : 0));
  auto sa = nnx::state(a), sb = nnx::state(b);
  for (const auto& [path, v] : sa) {
    INFO(path);
    const at::Tensor& start = nnx::state(initial).at(path).tensor();
    const double moved = finite_max_abs(sb.at(path).tensor() - start);
    CHECK(moved > 0);  // it trained
    CHECK(same_values(v.tensor(), sb.at(path).tensor(), sqrt, moved));
  }
  auto oa = fused.state(), ob = reference.state();
  REQUIRE(oa.size() == ob.size());
  for (const auto& [path, v] : oa) {
    INFO(path);
    CHECK(same_values(v.tensor(), ob.at(path).tensor(), sqrt, finite_max_abs(ob.at(path).tensor())));
  }
}

}  // namespace

TEST_CASE("the fused optimizer step equals the transformations' update") {
  // sqrt: compared within 2 ulp in float32 and float64 (LibTorch's float sqrt); bfloat16 and
  // float16 (where the pass takes it) bit for bit (RMSProp's tensor ops take the root and its
  // reciprocal in float, rounded once).
  struct Case {
    std::string name;
    std::function<optim::GradientTransformation()> make;
    bool sqrt = false;
  };
  const std::vector<Case> cases{
      {"sgd", [] { return optim::sgd(0.1); }},
      {"sgd momentum", [] { return optim::sgd(0.05, 0.9); }},
      {"sgd nesterov", [] { return optim::sgd(0.05, 0.9, true); }},
      {"lion, piecewise", [] {
         return optim::lion(optim::piecewise_constant_schedule(1e-3, {{2, 0.5}}), 0.9, 0.99, 0.1);
       }},
      {"clip then sgd, decayed", [] {
         return optim::chain({optim::clip_by_global_norm(1.0), optim::add_decayed_weights(0.1),
                              optim::sgd(0.1, 0.5)});
       }},
      {"adam", [] { return optim::adam(1e-2); }, true},
      {"adamw masked, cosine",
       [] {
         return optim::adamw(optim::warmup_cosine_decay_schedule(0, 1e-2, 2, 5), 0.9, 0.999,
                             1e-8, 0.1, nnx::PathContains("kernel"));
       },
       true},
      {"rmsprop momentum", [] { return optim::rmsprop(1e-2, 0.9, 1e-8, 0.5, 0.9); }, true},
      {"clip then adam",
       [] { return optim::chain({optim::clip_by_global_norm(1.0), optim::adam(3e-3)}); }, true},
      {"adam with eps_root, scaled",
       [] { return optim::chain({optim::scale_by_adam(0.8, 0.99, 1e-6, 1e-7), optim::scale(-0.01)}); },
       true},
  };
  std::vector<at::ScalarType> dtypes{torch::kFloat, torch::kDouble, torch::kBFloat16};
  if (optim::detail::float16_lanes()) dtypes.push_back(torch::kHalf);
  for (auto dtype : dtypes)
    for (const auto& c : cases)
      check_same(c.name, c.make, dtype,
                 (dtype == torch::kFloat || dtype == torch::kDouble) && c.sqrt);
}

TEST_CASE("bfloat16 Adam with moments near eps and eps_root equals the tensor ops bit for bit") {
  // eps and eps_root are added to bfloat16 values, rounded to bfloat16 as every scalar is (as
  // JAX rounds them). Gradients of 1e-8 put the square roots next to them.
  check_same("adam, tiny gradients", [] { return optim::adam(1e-2); }, torch::kBFloat16, false,
             true, 1e-8);
  check_same("adam with eps_root, tiny gradients",
             [] { return optim::chain({optim::scale_by_adam(0.9, 0.999, 1e-8, 1e-16),
                                       optim::scale(-0.01)}); },
             torch::kBFloat16, false, true, 1e-8);
}

TEST_CASE("float16 takes the fused pass only on CPUs with AVX2 and F16C, equal to the tensor ops") {
  // Elsewhere (and in unoptimized or Clang builds) the tensor ops. Adam with eps 1e-8 (zero in
  // float16) divides by zero where a second moment underflows: NaNs at the same places.
  const bool lanes = optim::detail::float16_lanes();
  if (!lanes) WARN("no float16 lanes in this build or on this CPU: only the fallback is checked");
  INFO("threads " << at::get_num_threads());
  check_same("adam in float16", [] { return optim::adam(1e-2); }, torch::kHalf, false, lanes);
  check_same<Long>("adamw, split over threads",
                   [] { return optim::adamw(1e-2, 0.9, 0.999, 1e-4, 0.1); }, torch::kHalf, false,
                   lanes);
  check_same<Long>("rmsprop momentum, split over threads",
                   [] { return optim::rmsprop(1e-2, 0.9, 1e-4, 0.5, 0.9); }, torch::kHalf, false,
                   lanes);
}

TEST_CASE("slots made for other parameters take the transformations' update") {
  // A model cast to bfloat16 after its optimizer was made: the float32 moments do not fit the
  // pass, which must leave the step to the tensor ops (type promotion) rather than fail midway.
  torch::manual_seed(4);
  Three a(torch::kFloat);
  Three b = nnx::clone(a);
  const Three initial = nnx::clone(a);
  optim::Optimizer fused(a, optim::adam(1e-2)), reference(b, unfused(optim::adam(1e-2)));
  for (Three* m : {&a, &b})
    for (auto& [path, v] : nnx::state(*m)) v.set_value(nnx::Array(v.tensor().to(torch::kBFloat16)));
  const int64_t runs_before = optim::detail::fused_pass_runs();
  for (int step = 0; step < 3; ++step) {
    nnx::State g = grads_for(a, step);
    fused.update(a, g);
    reference.update(b, g);
  }
  CHECK(optim::detail::fused_pass_runs() == runs_before);
  auto sb = nnx::state(b), s0 = nnx::state(initial);
  for (const auto& [path, v] : nnx::state(a)) {
    INFO(path);
    CHECK(torch::equal(v.tensor(), sb.at(path).tensor()));
    // It trained: three steps of Adam at 1e-2 move a value by a few hundredths at most.
    const double moved = (v.tensor().to(torch::kFloat) - s0.at(path).tensor()).abs().max().item<double>();
    CHECK(moved > 0);
    CHECK(moved < 0.15);
  }
}

TEST_CASE("chains the fused pass cannot take fall back to update and stay correct") {
  // Clipping after another stage needs the norm of updates mid-chain; a custom transformation has
  // no fused form. Both train exactly as the unfused optimizer.
  check_same("scale then clip",
             [] { return optim::chain({optim::scale(2.0), optim::clip_by_global_norm(1.0),
                                       optim::sgd(0.1)}); },
             torch::kFloat, false, /*fused_pass=*/false);
  check_same("custom in a chain",
             [] {
               optim::GradientTransformation halve{
                   [](const nnx::State&) { return optim::TxState{}; },
                   [](nnx::State& u, optim::TxState&, const nnx::State&) {
                     for (auto& [path, v] : u) v.set_value(v.value().with_local(v.tensor() * 0.5));
                   }};
               return optim::chain({halve, optim::adam(1e-2)});
             },
             torch::kFloat, false, /*fused_pass=*/false);
  // The fallback against the formula, not only against itself: u = 2g, clipped to global norm
  // 1 (here 2 * 5 = 10, so u = g / 5), then p - 0.1 u.
  struct Two : nnx::Module {
    nnx::Param NNX_FIELD(w);
    nnx::Param NNX_FIELD(b);
    Two() : w(torch::ones({2}, torch::kDouble)), b(torch::zeros({1}, torch::kDouble)) {}
  } two;
  optim::Optimizer clipped(two, optim::chain({optim::scale(2.0), optim::clip_by_global_norm(1.0),
                                              optim::sgd(0.1)}));
  nnx::State g2;
  g2.add("w", nnx::Param(torch::tensor({3.0, 0.0}, torch::kDouble)));
  g2.add("b", nnx::Param(torch::tensor({4.0}, torch::kDouble)));
  clipped.update(two, g2);
  CHECK(torch::allclose(two.w.tensor(), torch::tensor({1.0 - 0.1 * 0.6, 1.0}, torch::kDouble)));
  CHECK(torch::allclose(two.b.tensor(), torch::tensor({-0.1 * 0.8}, torch::kDouble)));
  // A one-step Adam on bfloat16 parameters moves each by the learning rate.
  struct Half : nnx::Module {
    nnx::Param NNX_FIELD(w);
    Half() : w(torch::ones({4}, torch::kBFloat16)) {}
  } h;
  optim::Optimizer opt(h, optim::adam(0.5));
  nnx::State g;
  g.add("w", nnx::Param(torch::full({4}, 2.0, torch::kBFloat16)));
  opt.update(h, g);
  CHECK(torch::allclose(h.w.tensor().to(torch::kFloat), torch::full({4}, 0.5)));
}
