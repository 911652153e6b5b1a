// scan over stacked steps equals the step loop; gradient accumulation over micro-batches equals
// one big batch; both on one process and data-parallel meshes.
#include "../catch_after_torch.h"

#include <nnx/nnx.h>

#include <torch/types.h>
#include <torch/utils.h>

namespace {

struct Net : nnx::Module {
  explicit Net(nnx::Rngs& rngs) : mlp({6, 8, 2}, rngs) {}
  nnx::Array operator()(const nnx::Array& x) const { return mlp(x); }
  nnx::MLP NNX_FIELD(mlp);
};

nnx::Array loss_fn(Net& m, const nnx::Array& x, const nnx::Array& y) {
  return nnx::mean_squared_error(m(x), y);
}

// The seed's flow: data [steps, batch, features] sharded on the batch dim, model replicated.
void check_scan(const std::shared_ptr<const nnx::Mesh>& mesh) {
  torch::manual_seed(0);
  const int64_t batch = 4 * (mesh ? mesh->size() : 1);
  auto x = torch::randn({5, batch, 6}, torch::kDouble), y = torch::randn({5, batch, 2}, torch::kDouble);
  auto place = [&](const at::Tensor& t) {  // stacked [steps, batch, ...] or one step's [batch, ...]
    auto spec = t.dim() == 3 ? nnx::P(nnx::none, "data") : nnx::P("data");
    return mesh ? nnx::device_put(t, {mesh, spec}) : nnx::Array(t);
  };
  auto run = [&](bool scanned) {
    nnx::Rngs rngs(0);
    Net model(rngs);
    for (auto& [path, v] : nnx::state(model)) {
      v.set_value(nnx::Array(v.tensor().to(torch::kDouble)));
      if (mesh) v.set_value(nnx::device_put(v.tensor(), {mesh, nnx::P()}));
    }
    nnx::optim::Optimizer opt(model, nnx::optim::adam(1e-2));
    auto train_step = [&](const nnx::Array& xb, const nnx::Array& yb) {
      auto [loss, grads] =
          nnx::value_and_grad([&](Net& m) { return loss_fn(m, xb, yb); }, model);
      opt.update(model, grads);
      return loss;
    };
    std::vector<at::Tensor> losses;
    if (scanned) {
      nnx::Array stacked = nnx::scan(train_step, place(x), place(y));
      CHECK(stacked.shape() == nnx::Shape{5});
      losses.push_back(nnx::gather(stacked));
    } else {
      for (int64_t k = 0; k < 5; ++k) {
        auto xs = place(x[k]), ys = place(y[k]);
        losses.push_back(nnx::gather(train_step(xs, ys)).reshape({1}));
      }
    }
    CHECK(opt.step() == 5);
    return std::pair{torch::cat(losses), nnx::gather(model.mlp.layers[0].kernel.value())};
  };
  auto [scan_losses, scan_kernel] = run(true);
  auto [loop_losses, loop_kernel] = run(false);
  CHECK(torch::equal(scan_losses, loop_losses));
  CHECK(torch::equal(scan_kernel, loop_kernel));
  CHECK(scan_losses[4].item<double>() < scan_losses[0].item<double>());
  if (mesh) {
    // A sharded steps dim is an error that says what to shard instead.
    auto bad = nnx::device_put(torch::randn({mesh->size(), 4, 6}), {mesh, nnx::P("data")});
    CHECK_THROWS_WITH(nnx::scan([](const nnx::Array& a) { return a; }, bad),
                      Catch::Contains("shard the batch dim"));
  }
}

void check_accumulation(const std::shared_ptr<const nnx::Mesh>& mesh) {
  torch::manual_seed(1);
  const int64_t micro = 4 * (mesh ? mesh->size() : 1);
  auto x = torch::randn({4 * micro, 6}, torch::kDouble), y = torch::randn({4 * micro, 2}, torch::kDouble);
  auto place = [&](const at::Tensor& t) {
    return mesh ? nnx::device_put(t, {mesh, nnx::P("data")}) : nnx::Array(t);
  };
  nnx::Rngs rngs(0);
  Net model(rngs);
  for (auto& [path, v] : nnx::state(model)) {
    v.set_value(nnx::Array(v.tensor().to(torch::kDouble)));
    if (mesh) v.set_value(nnx::device_put(v.tensor(), {mesh, nnx::P()}));
  }
  auto xs = place(x), ys = place(y);
  auto& counts = nnx::gradient_reduction_counts();
  counts = {};
  auto [full_loss, full_grads] =
      nnx::value_and_grad([&](Net& m) { return loss_fn(m, xs, ys); }, model);
  const auto one_step = counts;
  counts = {};
  auto [loss, grads] = nnx::value_and_grad_accumulated(
      [&](Net& m, int64_t i) {
        return loss_fn(m, place(x.narrow(0, i * micro, micro)), place(y.narrow(0, i * micro, micro)));
      },
      model, 4);
  // One reduction per step, not per micro-batch, started during the last backward.
  CHECK(counts.all_reduce_buckets == one_step.all_reduce_buckets);
  CHECK(counts.started_in_backward == one_step.all_reduce_buckets);
  if (mesh && mesh->size() > 1) CHECK(one_step.all_reduce_buckets == 1);
  CHECK(torch::allclose(nnx::gather(loss), nnx::gather(full_loss), 1e-12, 1e-14));
  // nnx::grad gives value_and_grad's gradients alone.
  auto only = nnx::grad([&](Net& m) { return loss_fn(m, xs, ys); }, model);
  REQUIRE(only.paths() == full_grads.paths());
  for (const auto& [path, g] : full_grads)
    CHECK(torch::equal(only[path].tensor(), g.tensor()));
  REQUIRE(grads.paths() == full_grads.paths());
  for (const auto& [path, g] : full_grads) {
    INFO(path);
    CHECK(grads[path].is<nnx::Param>());
    CHECK(grads[path].value().spec() == g.value().spec());
    CHECK(torch::allclose(nnx::gather(grads[path].value()), nnx::gather(g.value()), 1e-12, 1e-14));
  }
}

}  // namespace

TEST_CASE("scan runs K train steps over stacked data like the step loop") { check_scan(nullptr); }

TEST_CASE("scan over data sharded on the batch dim equals the step loop", "[ranks2][ranks4][ranks8]") {
  check_scan(nnx::make_mesh({nnx::world_size()}, {"data"}));
}

TEST_CASE("accumulated gradients over micro-batches equal the big batch's") {
  check_accumulation(nullptr);
}

TEST_CASE("accumulated data-parallel gradients equal the big batch's", "[ranks2][ranks4][ranks8]") {
  check_accumulation(nnx::make_mesh({nnx::world_size()}, {"data"}));
}
