// ZeRO-1 through Metadata::optimizer_sharding: gradients reduce-scattered into the optimizer's
// layout, moments holding 1/data-size of each block, updates all-gathered; training equals
// training without it.
#include "../catch_after_torch.h"

#include <nnx/optim/detail/step_kernel.h>

#include "optim_test_models.h"

#include <torch/utils.h>

using Catch::Matchers::Contains;
using nnx::none;
using nnx::P;
namespace optim = nnx::optim;

namespace {

struct ZeroLayout {
  std::string name;
  std::vector<int64_t> mesh_shape;
  std::vector<std::string> axes;
  std::vector<nnx::Metadata> plain, zero;          // per parameter (net_paths() order)
  std::vector<std::optional<nnx::PartitionSpec>> slot_spec;  // ZeRO layout, or none
  int64_t zero_buckets;  // reduce-scatter buckets under the default cap (per set of axes)
};

// Data-only (8) and data x model (2,4), (4,2); logical names through a variable's
// sharding_rules (layers.0.kernel on 8) and the active scope ("batch" -> data).
std::vector<ZeroLayout> zero_layouts() {
  nnx::ShardingRules zero_rule{{"zero", "data"}};
  std::vector<ZeroLayout> out{
      {"data-only", {8}, {"data"}, {},
       {{.sharding_rules = zero_rule, .optimizer_sharding = P("zero", none)},
        {.optimizer_sharding = P("data")},
        {.optimizer_sharding = P("batch", none)},
        {}},  // 4 rows do not split 8 ways: stays with the bucketed all-reduce
       {P("data", none), P("data"), P("data", none), std::nullopt},
       1}};
  for (const auto& shape : std::vector<std::vector<int64_t>>{{2, 4}, {4, 2}}) {
    std::vector<nnx::Metadata> plain{{.out_sharding = P(none, "model")},
                                     {.out_sharding = P("model")},
                                     {.out_sharding = P("model", none)},
                                     {}};
    auto zero = plain;
    zero[0].optimizer_sharding = P("data", none);
    zero[1].optimizer_sharding = P("data");  // after 'model' on the same dim: splits the block
    zero[2].optimizer_sharding = P(none, "batch");
    zero[3].optimizer_sharding = P("data");  // replicated on both: reduce_scatter + all_reduce
    out.push_back({"data x model", shape, {"data", "model"}, plain, zero,
                   {P("data", "model"), P({"model", "data"}), P("model", "data"), P("data")},
                   2});  // zero[3] also all-reduces over 'model': a bucket of its own
  }
  return out;
}

optim::GradientTransformation clipped_adamw() {
  return optim::chain(
      {optim::clip_by_global_norm(0.1), optim::adamw(1e-2, 0.9, 0.999, 1e-8, 1e-2)});
}

struct Batch {
  at::Tensor x, y;
};
Batch batch(int step) {
  torch::manual_seed(7 + step);
  return {torch::randn({16, 8}, torch::kDouble), torch::randn({16, 4}, torch::kDouble)};
}

// One training run: the model, its optimizer, and how to take a step.
struct Run {
  nnx_test::Net model;
  optim::Optimizer opt;
  Run(const std::shared_ptr<const nnx::Mesh>& mesh, std::vector<nnx::Metadata> md)
      : model(nnx_test::make_net(mesh, std::move(md))), opt(model, clipped_adamw()) {}
  nnx::LossAndGrads grads(int step, int64_t bucket_cap_bytes = 25 << 20) {
    auto [x, y] = batch(step);
    const auto& mesh = model.layers[0].kernel.value().mesh();
    nnx::Array xs = mesh ? nnx::device_put(x, {mesh, P("data", none)}) : nnx::Array(x);
    nnx::Array ys = mesh ? nnx::device_put(y, {mesh, P("data", none)}) : nnx::Array(y);
    return nnx::value_and_grad([&](nnx_test::Net& m) { return nnx::mean_squared_error(m(xs), ys); },
                               model, {.bucket_cap_bytes = bucket_cap_bytes});
  }
  double step(int s) {
    auto [loss, g] = grads(s);
    opt.update(model, std::move(g));
    return nnx::gather(loss).item<double>();
  }
};

}  // namespace

TEST_CASE("ZeRO-1 Adam training equals training without it", "[ranks8]") {
  nnx::LogicalAxisRules rules({{"batch", "data"}});
  for (const auto& layout : zero_layouts()) {
    INFO(layout.name << " on (" << fmt::format("{}", fmt::join(layout.mesh_shape, ", ")) << ")");
    auto mesh = nnx::make_mesh(layout.mesh_shape, layout.axes);
    const int64_t data = mesh->axis_size("data");
    Run plain(mesh, layout.plain), zero(mesh, layout.zero);
    Run one_device(nullptr, layout.zero);  // optimizer_sharding without a mesh changes nothing
    const auto& paths = nnx_test::net_paths();

    // Moments: each rank holds 1/data-size of its parameter block, in the ZeRO layout.
    auto zero_state = zero.opt.state(), plain_state = plain.opt.state();
    for (size_t i = 0; i < paths.size(); ++i) {
      INFO(paths[i]);
      const nnx::Variable param = nnx::state(zero.model)[paths[i]];
      for (const char* slot : {"mu", "nu"}) {
        const auto& m = zero_state[fmt::format("opt_state.1.0.{}.{}", slot, paths[i])];
        int64_t share = layout.slot_spec[i] ? data : 1;
        CHECK(m.tensor().numel() * share == param.tensor().numel());
        CHECK(m.value().spec() == nnx::pad_spec(layout.slot_spec[i].value_or(param.value().spec()),
                                                param.shape().size()));
      }
    }

    for (int s = 0; s < 4; ++s) {
      INFO("step " << s);
      // Gradients: reduce-scattered into the ZeRO layout, equal to the plain ones.
      auto& counts = nnx::gradient_reduction_counts();
      counts = {};
      nnx::redistribute_counts() = {};
      auto plain_g = plain.grads(s, 8);  // a bucket per parameter: counts parameters
      const auto plain_counts = counts;
      const int64_t forward_collectives = nnx::redistribute_counts().collectives();
      counts = {};
      nnx::redistribute_counts() = {};
      auto zero_g = zero.grads(s, 8);
      const auto zero_counts = counts;
      // The gradients all travel in buckets: no redistribute beyond the forward pass's own.
      CHECK(nnx::redistribute_counts().collectives() == forward_collectives);
      int64_t zero_params = 0;
      for (size_t i = 0; i < paths.size(); ++i) {
        INFO(paths[i]);
        const auto& g = zero_g.grads[paths[i]];
        zero_params += layout.slot_spec[i].has_value();
        if (layout.slot_spec[i])
          CHECK(g.value().spec() == nnx::pad_spec(*layout.slot_spec[i], g.shape().size()));
        CHECK(torch::allclose(nnx::gather(g.value()), nnx::gather(plain_g.grads[paths[i]].value()),
                              1e-10, 1e-12));
      }
      CHECK(plain_counts.all_reduce_buckets == 4);  // every parameter is replicated along data
      CHECK(plain_counts.reduce_scatter_buckets == 0);
      CHECK(zero_counts.reduce_scatter_buckets == zero_params);
      CHECK(zero_counts.all_reduce_buckets == 4 - zero_params);
      CHECK(zero_counts.started_in_backward == 4);
      // With the default cap, ZeRO parameters share reduce-scatters: one per set of axes.
      counts = {};
      auto bucketed = zero.grads(s);
      CHECK(counts.reduce_scatter_buckets == layout.zero_buckets);
      // Equal to rounding: Open MPI picks its reduce-scatter algorithm by message size, so one
      // bucket and one per parameter may add the 8 replicas' float64 terms in other orders.
      for (const auto& path : paths) {
        const at::Tensor& single = zero_g.grads[path].tensor();
        CHECK(torch::allclose(bucketed.grads[path].tensor(), single, 1e-13,
                              1e-15 * single.abs().max().item<double>()));
      }
      // The global norm (what clip_by_global_norm scales by) is exact in either layout.
      const double norm = optim::global_norm(plain_g.grads);
      CHECK(optim::global_norm(zero_g.grads) == Approx(norm).epsilon(1e-12));
      CHECK(norm > 0.1);  // clipping is active

      // Updates: computed on the slices, all-gathered once per ZeRO parameter.
      nnx::redistribute_counts() = {};
      plain.opt.update(plain.model, std::move(plain_g.grads));
      CHECK(nnx::redistribute_counts().all_gather == 0);
      nnx::redistribute_counts() = {};
      const int64_t kernel_steps = optim::detail::step_kernel_steps();
      zero.opt.update(zero.model, std::move(zero_g.grads));
      CHECK(nnx::redistribute_counts().all_gather == zero_params);
      CHECK(nnx::redistribute_counts().reduce_scatter == 0);
      // On a GPU the ZeRO step, slices and all, is one run of nnx's step kernel.
      if (nnx::state(zero.model)[paths[0]].tensor().is_cuda())
        CHECK(optim::detail::step_kernel_steps() == kernel_steps + 1);

      double reference = one_device.step(s);
      CHECK(nnx::gather(zero_g.loss).item<double>() == Approx(reference).epsilon(1e-10));
      CHECK(nnx::gather(plain_g.loss).item<double>() == Approx(reference).epsilon(1e-10));
    }
    // Every rank's block (replicas included) equals the plain run's, and the whole the one-device.
    auto zp = nnx::state(zero.model), pp = nnx::state(plain.model);
    auto rp = nnx::state(one_device.model);
    for (const auto& path : paths) {
      INFO(path);
      CHECK(torch::allclose(zp[path].tensor(), pp[path].tensor(), 1e-10, 1e-12));
      CHECK(torch::allclose(nnx::gather(zp[path].value()).cpu(), rp[path].tensor(), 1e-10, 1e-12));
    }
    CHECK(zero.opt.step() == 4);
  }
}

TEST_CASE("load_state moves optimizer state between ZeRO and plain layouts", "[ranks8]") {
  nnx::LogicalAxisRules rules({{"batch", "data"}});
  const auto layout = zero_layouts()[1];  // data x model (2, 4)
  auto mesh = nnx::make_mesh(layout.mesh_shape, layout.axes);
  Run plain(mesh, layout.plain), zero(mesh, layout.zero);
  for (int s = 0; s < 2; ++s) plain.step(s);
  // The ZeRO run starts from the plain run's parameters and optimizer state.
  auto pp = nnx::state(plain.model), zp = nnx::state(zero.model);
  for (const auto& path : nnx_test::net_paths()) zp[path].tensor().copy_(pp[path].tensor());
  zero.opt.load_state(plain.opt.state());
  auto zs = zero.opt.state();
  for (const auto& [path, v] : plain.opt.state()) {
    INFO(path);
    CHECK(torch::equal(nnx::gather(zs[path].value()), nnx::gather(v.value())));
  }
  CHECK(zs["opt_state.1.0.mu.layers.0.kernel"].value().spec() == P("data", "model"));
  for (int s = 2; s < 4; ++s)
    CHECK(zero.step(s) == Approx(plain.step(s)).epsilon(1e-10));
  for (const auto& path : nnx_test::net_paths())
    CHECK(torch::allclose(zp[path].tensor(), pp[path].tensor(), 1e-10, 1e-12));
  // And back: a plain optimizer takes the ZeRO state (all-gathered).
  Run back(mesh, layout.plain);
  back.opt.load_state(zero.opt.state());
  for (const auto& [path, v] : zero.opt.state()) {
    INFO(path);
    CHECK(torch::equal(nnx::gather(back.opt.state()[path].value()), nnx::gather(v.value())));
    CHECK(back.opt.state()[path].value().spec() == plain.opt.state()[path].value().spec());
  }
}

TEST_CASE("an optimizer_sharding that does not fit is an error naming the path", "[ranks8]") {
  auto mesh = nnx::make_mesh({8}, {"data"});
  std::vector<nnx::Metadata> uneven(4), unknown(4);
  uneven[3].optimizer_sharding = P("data");  // 4 rows over 8 ranks
  unknown[0].optimizer_sharding = P("zero", none);
  for (const auto& [md, message] :
       {std::pair{uneven, std::string("'layers.1.bias' (its optimizer_sharding): dim 0 of size 4 "
                                      "is not divisible by 8")},
        std::pair{unknown, std::string("'layers.0.kernel' (its optimizer_sharding): "
                                       "PartitionSpec('zero', None) names axis 'zero', which "
                                       "Mesh('data': 8) does not have; use one of (data) or add "
                                       "a sharding rule for the logical name 'zero'")}}) {
    auto model = nnx_test::make_net(mesh, md);
    CHECK_THROWS_WITH(optim::Optimizer(model, optim::adam(1e-2)), Contains(message));
    auto x = nnx::device_put(torch::ones({8, 8}, torch::kDouble), {mesh, P("data", none)});
    CHECK_THROWS_WITH(
        nnx::value_and_grad([&](nnx_test::Net& m) { return nnx::mean(nnx::square(m(x))); }, model),
        Contains(message));
    CHECK_FALSE(model.layers[0].kernel.tensor().requires_grad());
  }
}
