// value_and_grad on meshes: data-, tensor- and mixed-parallel layouts of a two-layer MLP give the
// one-device loss and gradients after the framework's bucketed reduction.
#include "../catch_after_torch.h"

#include <nnx/nnx.h>

#include <torch/types.h>
#include <torch/utils.h>

using Catch::Matchers::Contains;

namespace {

struct TwoLayer : nnx::Module {
  nnx::Param NNX_FIELD(w1);
  nnx::Param NNX_FIELD(b1);
  nnx::Param NNX_FIELD(w2);
  nnx::Param NNX_FIELD(b2);
  explicit TwoLayer(nnx::Rngs& rngs)
      : w1(nnx::initializers::lecun_normal()(rngs.params(), {8, 16}, torch::kDouble)),
        b1(nnx::initializers::normal(0.1)(rngs.params(), {16}, torch::kDouble)),
        w2(nnx::initializers::lecun_normal()(rngs.params(), {16, 4}, torch::kDouble)),
        b2(nnx::initializers::normal(0.1)(rngs.params(), {4}, torch::kDouble)) {}
  nnx::Array operator()(const nnx::Array& x) const {
    auto h = nnx::relu(nnx::linear(x, w1.value(), b1.value()));
    return nnx::linear(h, w2.value(), b2.value());
  }
};

struct Layout {
  std::string name;
  std::vector<int64_t> mesh_shape;
  std::vector<std::string> axes;
  nnx::PartitionSpec x, w1, b1, w2, b2;
};

std::vector<Layout> layouts(int64_t n) {
  using nnx::none;
  using nnx::P;
  std::vector<Layout> out{
      {"data-parallel", {n}, {"data"}, P("data", none), P(), P(), P(), P()},
      {"tensor-parallel", {n}, {"model"}, P(), P(none, "model"), P("model"), P("model", none), P()},
  };
  std::vector<std::vector<int64_t>> two_d;
  if (n == 8) two_d = {{2, 4}, {4, 2}};
  if (n == 4) two_d = {{2, 2}};
  if (n == 2) two_d = {{1, 2}, {2, 1}};
  for (const auto& shape : two_d)
    out.push_back({"mixed", shape, {"data", "model"}, P("data", none), P(none, "model"),
                   P("model"), P("model", none), P()});
  return out;
}

void place(nnx::Param& p, const std::shared_ptr<const nnx::Mesh>& mesh, const nnx::PartitionSpec& s) {
  p.set_value(nnx::device_put(p.tensor(), {mesh, s}));
}

// A copy of `from` with its parameters laid out on `mesh` as the layout says.
TwoLayer placed_copy(const TwoLayer& from, const Layout& layout,
                     const std::shared_ptr<const nnx::Mesh>& mesh) {
  TwoLayer model = nnx::clone(from);
  place(model.w1, mesh, layout.w1);
  place(model.b1, mesh, layout.b1);
  place(model.w2, mesh, layout.w2);
  place(model.b2, mesh, layout.b2);
  return model;
}

}  // namespace

TEST_CASE("gradients on every layout equal the one-device gradients",
          "[ranks2][ranks4][ranks8]") {
  torch::manual_seed(0);
  auto x = torch::randn({16, 8}, torch::kDouble), y = torch::randn({16, 4}, torch::kDouble);
  nnx::Rngs rngs(0);
  TwoLayer reference(rngs);
  auto [ref_loss, ref_grads] = nnx::value_and_grad(
      [&](TwoLayer& m) { return nnx::mean_squared_error(m(nnx::Array(x)), nnx::Array(y)); },
      reference);
  // The oracle itself against LibTorch autograd on the plain tensors.
  auto w1 = reference.w1.tensor().clone().requires_grad_(true);
  auto b1 = reference.b1.tensor().clone().requires_grad_(true);
  auto w2 = reference.w2.tensor().clone().requires_grad_(true);
  auto b2 = reference.b2.tensor().clone().requires_grad_(true);
  auto torch_loss = ((x.matmul(w1) + b1).relu().matmul(w2) + b2 - y).pow(2).mean();
  torch_loss.backward();
  CHECK(torch::allclose(ref_loss.local(), torch_loss));
  CHECK(torch::allclose(ref_grads["w1"].tensor(), w1.grad()));
  CHECK(torch::allclose(ref_grads["b2"].tensor(), b2.grad()));

  for (const auto& layout : layouts(nnx::world_size())) {
    INFO(layout.name << " on mesh of " << layout.mesh_shape.size() << " axes, first " << layout.mesh_shape[0]);
    auto mesh = nnx::make_mesh(layout.mesh_shape, layout.axes);
    TwoLayer model = placed_copy(reference, layout, mesh);
    auto xs = nnx::device_put(x, {mesh, layout.x});
    auto ys = nnx::device_put(y, {mesh, layout.x});
    auto& counts = nnx::gradient_reduction_counts();
    counts = {};
    auto [loss, grads] = nnx::value_and_grad(
        [&](TwoLayer& m) { return nnx::mean_squared_error(m(xs), ys); }, model);
    CHECK(torch::allclose(nnx::gather(loss).cpu(), ref_loss.local(), 1e-12, 1e-12));
    for (const auto& path : {"w1", "b1", "w2", "b2"}) {
      INFO(path);
      CHECK(grads[path].is<nnx::Param>());
      // Gradients keep the parameter's layout.
      CHECK(grads[path].value().spec() == nnx::state(model)[path].value().spec());
      CHECK(torch::allclose(nnx::gather(grads[path].value()).cpu(), ref_grads[path].tensor(), 1e-10,
                            1e-12));
    }
    // One all-reduce per bucket: parameters sharing replica axes travel together.
    int64_t expected = layout.name == "mixed" ? 2 : 1;
    if (layout.name == "mixed" && layout.mesh_shape[0] == 1) expected = 1;  // no data replicas
    if (layout.name == "mixed" && layout.mesh_shape[1] == 1) expected = 1;  // b2's axes = data's
    CHECK(counts.all_reduce_buckets == expected);
    // Every bucket started from a hook, during backward.
    CHECK(counts.started_in_backward == expected);
    // A tiny cap puts each parameter in its own bucket; without overlap the buckets start after
    // backward, with the same results bit for bit.
    counts = {};
    auto tiny = nnx::value_and_grad(
        [&](TwoLayer& m) { return nnx::mean_squared_error(m(xs), ys); }, model,
        {.bucket_cap_bytes = 8});
    const int64_t tiny_buckets = counts.all_reduce_buckets;
    CHECK(tiny_buckets <= 4);
    CHECK(tiny_buckets >= expected);
    CHECK(counts.started_in_backward == tiny_buckets);
    counts = {};
    auto after = nnx::value_and_grad(
        [&](TwoLayer& m) { return nnx::mean_squared_error(m(xs), ys); }, model,
        {.bucket_cap_bytes = 8, .overlap = false});
    CHECK(counts.all_reduce_buckets == tiny_buckets);
    CHECK(counts.started_in_backward == 0);
    for (const auto& path : {"w1", "b1", "w2", "b2"}) {
      INFO(path);
      CHECK(torch::equal(after.grads[path].tensor(), tiny.grads[path].tensor()));
      CHECK(torch::equal(after.grads[path].tensor(), grads[path].tensor()));
    }
  }
}

TEST_CASE("has_aux returns the auxiliary value with the loss", "[ranks2][ranks4][ranks8]") {
  auto mesh = nnx::make_mesh({nnx::world_size()}, {"data"});
  nnx::Rngs rngs(0);
  TwoLayer model(rngs);
  // LibTorch's autograd on the whole batch, from the same parameters.
  torch::manual_seed(7);  // the same rows on every rank, each its own block of them
  const auto whole_x = torch::randn({8, 8}, torch::kDouble);
  std::vector<at::Tensor> leaves;
  for (auto* p : {&model.w1, &model.b1, &model.w2, &model.b2})
    leaves.push_back(p->tensor().detach().clone().requires_grad_(true));
  const auto expected_out =
      (whole_x.matmul(leaves[0]) + leaves[1]).relu().matmul(leaves[2]) + leaves[3];
  const auto expected_loss = expected_out.square().mean();
  expected_loss.backward();
  for (auto* p : {&model.w1, &model.b1, &model.w2, &model.b2})  // placed: replicated on the mesh
    p->set_value(nnx::device_put(p->tensor(), {mesh, nnx::P()}));
  auto x = nnx::device_put(whole_x, {mesh, nnx::P("data", nnx::none)});
  auto result = nnx::value_and_grad(
      [&](TwoLayer& m) {
        auto out = m(x);
        return std::make_pair(nnx::mean(nnx::square(out)), out);
      },
      model);
  CHECK(result.aux.shape() == nnx::Shape{8, 4});
  CHECK(result.aux.spec() == nnx::P("data", nnx::none));
  CHECK(torch::allclose(nnx::gather(result.aux), expected_out.detach()));
  CHECK(nnx::gather(result.loss).item<double>() ==
        Approx(expected_loss.item<double>()).epsilon(1e-12));
  const char* paths[] = {"w1", "b1", "w2", "b2"};
  for (size_t i = 0; i < 4; ++i) {
    INFO(paths[i]);
    CHECK(torch::allclose(nnx::gather(result.grads[paths[i]].value()), leaves[i].grad()));
  }
  CHECK_FALSE(model.w1.tensor().requires_grad());  // leaves are detached again
}

TEST_CASE("a parameter without a gradient on some rank is an error on every rank",
          "[ranks2][ranks4][ranks8]") {
  auto mesh = nnx::make_mesh({nnx::world_size()}, {"data"});
  nnx::Rngs rngs(0);
  TwoLayer model(rngs);
  auto x = nnx::device_put(torch::ones({8, 8}, torch::kDouble), {mesh, nnx::P("data", nnx::none)});
  for (auto* p : {&model.w1, &model.b1, &model.w2, &model.b2})
    p->set_value(nnx::device_put(p->tensor(), {mesh, nnx::P()}));
  auto loss_fn = [&](TwoLayer& m) {
    auto h = nnx::relu(nnx::linear(x, m.w1.value(), m.b1.value()));
    auto out = nnx::matmul(h, m.w2.value());
    if (nnx::world_rank() == 0) out = out + m.b2.value();  // b2 only on rank 0
    return nnx::mean(nnx::square(out));
  };
  CHECK_THROWS_WITH(nnx::value_and_grad(loss_fn, model), Contains("no gradient reached"));
  // A bucket per parameter: rank 0 starts b2's from a hook, the others only after backward.
  CHECK_THROWS_WITH(nnx::value_and_grad(loss_fn, model, {.bucket_cap_bytes = 8}),
                    Contains("no gradient reached"));
  CHECK_FALSE(model.b2.tensor().requires_grad());
  // Every rank issued the same collectives: the next steps run and agree.
  auto good_fn = [&](TwoLayer& m) { return nnx::mean(nnx::square(m(x))); };
  auto overlapped = nnx::value_and_grad(good_fn, model, {.bucket_cap_bytes = 8});
  auto after = nnx::value_and_grad(good_fn, model, {.bucket_cap_bytes = 8, .overlap = false});
  for (const auto& path : {"w1", "b1", "w2", "b2"})
    CHECK(torch::equal(overlapped.grads[path].tensor(), after.grads[path].tensor()));
}

TEST_CASE("five Adam steps on every layout follow the one-device trajectory",
          "[ranks2][ranks4][ranks8]") {
  torch::manual_seed(3);
  auto x = torch::randn({16, 8}, torch::kDouble), y = torch::randn({16, 4}, torch::kDouble);
  nnx::Rngs rngs(0);
  TwoLayer reference(rngs);
  TwoLayer start = nnx::clone(reference);
  nnx::optim::Optimizer ref_opt(reference, nnx::optim::adam(1e-2));
  std::vector<double> ref_losses;
  for (int step = 0; step < 5; ++step) {
    auto [loss, grads] = nnx::value_and_grad(
        [&](TwoLayer& m) { return nnx::mean_squared_error(m(nnx::Array(x)), nnx::Array(y)); },
        reference);
    ref_opt.update(reference, std::move(grads));
    ref_losses.push_back(loss.local().item<double>());
  }
  for (const auto& layout : layouts(nnx::world_size())) {
    INFO(layout.name << " on a mesh of " << layout.mesh_shape.size() << " axes");
    auto mesh = nnx::make_mesh(layout.mesh_shape, layout.axes);
    TwoLayer model = placed_copy(start, layout, mesh);
    auto xs = nnx::device_put(x, {mesh, layout.x});
    auto ys = nnx::device_put(y, {mesh, layout.x});
    nnx::optim::Optimizer opt(model, nnx::optim::adam(1e-2));
    for (int step = 0; step < 5; ++step) {
      auto [loss, grads] = nnx::value_and_grad(
          [&](TwoLayer& m) { return nnx::mean_squared_error(m(xs), ys); }, model);
      opt.update(model, std::move(grads));
      CHECK(nnx::gather(loss).item<double>() == Approx(ref_losses[step]).epsilon(1e-10));
    }
    for (const auto& path : {"w1", "b1", "w2", "b2"})
      CHECK(torch::allclose(nnx::gather(nnx::state(model)[path].value()).cpu(),
                            nnx::state(reference)[path].tensor(), 1e-10, 1e-12));
  }
}

namespace {
struct Scalars : nnx::Module {
  nnx::Param NNX_FIELD(w);
  nnx::Param NNX_FIELD(count);  // an integer Param: no gradient unless the wrt filter leaves it out
  Scalars() : w(torch::full({1}, 2.0)), count(torch::zeros({}, torch::kLong)) {}
};
}  // namespace

TEST_CASE("a gradient inside another's loss function is refused, and errors leave no leaves") {
  Scalars model;
  const auto only_w = nnx::PathContains("w");
  // Nested: the inner call's leaves would cut the outer graph, and the outer gradient of
  // sum(w) + sum(w^2) came out 1 instead of 1 + 2w = 5.
  CHECK_THROWS_WITH(
      nnx::grad(
          [&](Scalars& m) {
            auto a = nnx::sum(m.w.value());
            (void)nnx::grad([](Scalars& n) { return nnx::sum(nnx::square(n.w.value())); }, m,
                            {.wrt = only_w});
            return a + nnx::sum(nnx::square(m.w.value()));
          },
          model, {.wrt = only_w}),
      Contains("nested gradients are not supported"));
  CHECK_FALSE(model.w.tensor().requires_grad());
  auto g = nnx::grad(
      [](Scalars& m) { return nnx::sum(m.w.value()) + nnx::sum(nnx::square(m.w.value())); },
      model, {.wrt = only_w});
  CHECK(g["w"].tensor().item<double>() == 5.0);  // the same sum taken alone

  // An integer Param in the wrt filter: the float one before it used to stay a leaf.
  CHECK_THROWS_WITH(nnx::grad([](Scalars& m) { return nnx::sum(m.w.value()); }, model),
                    Contains("'count' is int64 and cannot take a gradient"));
  CHECK_FALSE(model.w.tensor().requires_grad());
  CHECK_THROWS_WITH(nnx::grad([](Scalars& m) { return nnx::sum(m.w.value()); }, model,
                              {.wrt = only_w, .bucket_cap_bytes = 0}),
                    Contains("bucket_cap_bytes must be positive"));
  CHECK_FALSE(model.w.tensor().requires_grad());
  model.w.tensor().add_(1);  // in place, as a user may: no leaf left to refuse it
  CHECK(model.w.tensor().item<double>() == 3.0);
}

namespace {
struct Pair : nnx::Module {
  nnx::Param NNX_FIELD(a);
  nnx::Param NNX_FIELD(b);
  nnx::Param NNX_FIELD(c);
  Pair() : a(torch::ones({2, 3})), b(torch::ones({2, 3})), c(torch::ones({4})) {}
};
}  // namespace

TEST_CASE("every gradient is a dense tensor of its own, safe to change in place") {
  Pair model;
  const auto x = torch::arange(6, torch::kFloat).reshape({2, 3});
  // (a + b) hands one tensor to both parameters, and sum(c) an expanded scalar.
  auto g = nnx::grad(
      [&](Pair& m) {
        return nnx::sum((m.a.value() + m.b.value()) * nnx::Array(x)) + nnx::sum(m.c.value());
      },
      model);
  const nnx::State params = nnx::state(model);
  for (const char* path : {"a", "b", "c"}) {
    INFO(path);
    CHECK(g[path].tensor().is_non_overlapping_and_dense());
    CHECK(g[path].tensor().strides() == params[path].tensor().strides());
  }
  CHECK_FALSE(g["a"].tensor().is_alias_of(g["b"].tensor()));
  g["a"].tensor().mul_(2);  // as clipping by hand would
  g["c"].tensor().mul_(3);
  CHECK(torch::equal(g["a"].tensor(), 2 * x));
  CHECK(torch::equal(g["b"].tensor(), x));
  CHECK(torch::equal(g["c"].tensor(), torch::full({4}, 3.0f)));
}

namespace {
struct WithCache : nnx::Module {
  nnx::Linear NNX_FIELD(encoder);
  nnx::Linear NNX_FIELD(head);
  nnx::Cache NNX_FIELD(features);
  explicit WithCache(nnx::Rngs& rngs)
      : encoder(3, 4, rngs), head(4, 1, rngs), features(torch::zeros({2, 4})) {}
};
}  // namespace

TEST_CASE("aux and variables written in the loss function come back detached, as plain values") {
  nnx::Rngs rngs(0);
  WithCache model(rngs);
  const nnx::Array x(torch::randn({2, 3}));
  auto first = nnx::value_and_grad(
      [&](WithCache& m) {
        nnx::Array f = m.encoder(x);
        m.features.set_value(f);  // written from the graph
        return std::make_pair(nnx::mean(nnx::square(m.head(f))),
                              std::make_tuple(f, std::vector<at::Tensor>{f.local() * 2},
                                              std::vector<bool>{true, false}));
      },
      model);
  const auto& [features, doubled, flags] = first.aux;
  CHECK(flags == std::vector<bool>{true, false});  // left as it is
  CHECK_FALSE(features.local().requires_grad());
  CHECK_FALSE(doubled[0].requires_grad());
  CHECK_FALSE(model.features.tensor().requires_grad());
  CHECK(torch::equal(model.features.tensor(), features.local()));
  // The aux as the target of the next step: it used to reach back into the freed graph.
  nnx::optim::Optimizer opt(model, nnx::optim::sgd(0.1));
  opt.update(model, first.grads);
  auto second = nnx::value_and_grad(
      [&](WithCache& m) { return nnx::mean(nnx::square(m.head(m.encoder(x) - features))); },
      model);
  // Against LibTorch: the same loss with the old features as a constant.
  auto leaf = [](const nnx::Variable& v) { return v.tensor().detach().clone().requires_grad_(); };
  auto kernel = leaf(model.encoder.kernel), bias = leaf(*model.encoder.bias);
  auto head_kernel = leaf(model.head.kernel), head_bias = leaf(*model.head.bias);
  auto h = x.local().matmul(kernel) + bias - features.local();
  (h.matmul(head_kernel) + head_bias).square().mean().backward();
  CHECK(torch::allclose(second.grads["encoder.kernel"].tensor(), kernel.grad()));
  CHECK(torch::allclose(second.grads["encoder.bias"].tensor(), bias.grad()));
  CHECK(torch::allclose(second.grads["head.kernel"].tensor(), head_kernel.grad()));
}

TEST_CASE("accumulated micro-batches each see what the previous one wrote, detached") {
  nnx::Rngs rngs(0);
  WithCache model(rngs);
  const auto x = torch::randn({4, 3});
  // Micro-batch i reads the features micro-batch i - 1 wrote (a carried state): the second
  // backward used to reach into the first one's freed graph.
  auto total = nnx::value_and_grad_accumulated(
      [&](WithCache& m, int64_t i) {
        nnx::Array f = m.encoder(nnx::Array(x.narrow(0, 2 * i, 2)));
        nnx::Array loss = nnx::mean(nnx::square(m.head(f + m.features.value())));
        m.features.set_value(f);
        return loss;
      },
      model, 2);
  CHECK_FALSE(model.features.tensor().requires_grad());
  // Against LibTorch: the second micro-batch's carried features are a constant.
  auto leaf = [](const nnx::Variable& v) { return v.tensor().detach().clone().requires_grad_(); };
  auto k = leaf(model.encoder.kernel), b = leaf(*model.encoder.bias);
  auto hk = leaf(model.head.kernel), hb = leaf(*model.head.bias);
  auto f0 = x.narrow(0, 0, 2).matmul(k) + b, f1 = x.narrow(0, 2, 2).matmul(k) + b;
  auto l0 = (f0.matmul(hk) + hb).square().mean();  // the cache starts at zeros
  auto l1 = ((f1 + f0.detach()).matmul(hk) + hb).square().mean();
  ((l0 + l1) / 2).backward();
  CHECK(torch::allclose(total.grads["encoder.kernel"].tensor(), k.grad()));
  CHECK(torch::allclose(total.grads["head.kernel"].tensor(), hk.grad()));
  CHECK(torch::allclose(total.loss.local(), ((l0 + l1) / 2).detach()));
}
