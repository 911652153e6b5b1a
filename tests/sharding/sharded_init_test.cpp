// Sharded initialization: under a MeshContext or through eval_shape + materialize, each process
// computes only its own blocks, and gathered values equal the one-device model bitwise; without
// a mesh, whole arrays. Initializer errors name the variable; a state of blocks refuses to write
// its values to JSON.
#include "../catch_after_torch.h"

#include "sharding_test_util.h"

#include <nnx/nnx.h>

#include <torch/types.h>

namespace {

using nnx::P;

// Logical names on every variable; the rules decide the layout per mesh.
struct Tower : nnx::Module {
  explicit Tower(nnx::Rngs& rngs)
      : embed(64, 16, rngs, {.embedding_metadata = {.out_sharding = P("vocab", "embed")}}),
        up(16, 32, rngs,
           {.kernel_metadata = {.out_sharding = P("embed", "mlp")},
            .bias_metadata = {.out_sharding = P("mlp")}}),
        down(32, 16, rngs, {.kernel_metadata = {.out_sharding = P("mlp", "embed")}}),
        norm(16, rngs, {.scale_metadata = {.out_sharding = P("embed")}}) {}

  nnx::Embed NNX_FIELD(embed);
  nnx::Linear NNX_FIELD(up);
  nnx::Linear NNX_FIELD(down);
  nnx::LayerNorm NNX_FIELD(norm);
};

struct MeshCase {
  std::vector<int64_t> shape;
  std::vector<std::string> axes;
  nnx::ShardingRules rules;
};

std::vector<MeshCase> mesh_cases() {
  return {
      {{8}, {"model"}, {{"vocab", "model"}, {"embed", nnx::none}, {"mlp", "model"}}},
      {{2, 4}, {"data", "model"}, {{"vocab", nnx::none}, {"embed", "data"}, {"mlp", "model"}}},
      {{4, 2}, {"data", "model"},
       {{"vocab", nnx::SpecEntry{"data", "model"}}, {"embed", nnx::none}, {"mlp", "data"}}},
  };
}

// Every variable holds exactly its block (no whole tensor behind a view), equal bitwise to the
// same slice of the one-device value, and gathers to the one-device value bitwise.
void check_blocks(const nnx::State& sharded, const nnx::State& reference,
                  const std::shared_ptr<const nnx::Mesh>& mesh) {
  REQUIRE(sharded.paths() == reference.paths());
  for (const auto& [path, v] : sharded) {
    INFO(path << " on " << mesh->to_string());
    const auto& value = v.value();
    REQUIRE(value.mesh() == mesh);
    CHECK(value.spec() == nnx::resolve_partition_spec(path, v));
    const auto& local = value.local();
    CHECK(local.storage().nbytes() == static_cast<size_t>(local.numel() * local.element_size()));
    const auto& whole = reference[path].tensor();
    CHECK(torch::equal(local.cpu(), nnx_test::block_of(whole, value)));
    CHECK(torch::equal(nnx::gather(value).cpu(), whole));
  }
}

}  // namespace

TEST_CASE("a model built under a MeshContext holds its local blocks, bitwise the one-device values",
          "[ranks8]") {
  nnx::Rngs ref_rngs(0);
  Tower reference(ref_rngs);
  int64_t sharded_dims = 0;
  for (const auto& c : mesh_cases()) {
    auto mesh = nnx::make_mesh(c.shape, c.axes);
    nnx::LogicalAxisRules rules(c.rules);
    nnx::MeshContext on(mesh);
    nnx::Rngs rngs(0);
    Tower model(rngs);
    check_blocks(nnx::state(model), nnx::state(reference), mesh);
    CHECK(rngs.stream("default").counter() == ref_rngs.stream("default").counter());
    for (const auto& [path, v] : nnx::state(model))
      for (const auto& e : v.value().spec().entries()) sharded_dims += e.names().empty() ? 0 : 1;
  }
  CHECK(sharded_dims >= 12);  // the rules really shard most variables
}

TEST_CASE("eval_shape then materialize computes only local blocks, bitwise the one-device values",
          "[ranks8]") {
  nnx::Rngs ref_rngs(0);
  Tower reference(ref_rngs);
  for (const auto& c : mesh_cases()) {
    auto mesh = nnx::make_mesh(c.shape, c.axes);
    nnx::LogicalAxisRules rules(c.rules);
    nnx::Rngs rngs(0);
    auto model = nnx::eval_shape([&] { return Tower(rngs); });
    for (const auto& [path, v] : nnx::state(model)) CHECK(v.value().is_abstract());
    // A split keeps the initializers: the model can be materialized after a round trip.
    auto [graphdef, abstract_state] = nnx::split(model);
    auto merged = nnx::merge(graphdef, abstract_state);
    nnx::materialize(merged, mesh);
    check_blocks(nnx::state(merged), nnx::state(reference), mesh);
  }
}

TEST_CASE("a spec that does not fit fails on every rank, names the variable and changes nothing",
          "[ranks8]") {
  auto mesh = nnx::make_mesh({2, 4}, {"data", "model"});
  // 'mlp' maps to an axis the mesh lacks.
  nnx::LogicalAxisRules rules({{"vocab", "data"}, {"embed", "model"}, {"mlp", "expert"}});
  nnx::Rngs rngs(0);
  auto model = nnx::eval_shape([&] { return Tower(rngs); });
  try {
    nnx::materialize(model, mesh);
    FAIL("materialize accepted an unknown mesh axis");
  } catch (const nnx::Error& e) {
    std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("'up.kernel'"));
    CHECK_THAT(what, Catch::Contains("expert"));
  }
  for (const auto& [path, v] : nnx::state(model)) CHECK(v.value().is_abstract());
  // Under the context the model builds, and its first use names the path, shape and spec.
  nnx::MeshContext on(mesh);
  nnx::Rngs again(0);
  Tower built(again);
  for (auto use : std::vector<std::function<void()>>{[&] { nnx::state(built); },
                                                      [&] { built.up.kernel.value(); }})
    CHECK_THROWS_WITH(use(), Catch::Contains("'up.kernel'") && Catch::Contains("(16, 32)") &&
                                 Catch::Contains("expert"));
}

TEST_CASE("eval_shape then materialize without a mesh equals direct construction") {
  nnx::Rngs ref_rngs(0);
  Tower reference(ref_rngs);
  nnx::Rngs rngs(0);
  auto model = nnx::eval_shape([&] { return Tower(rngs); });
  CHECK(nnx::state(model).nbytes() == nnx::state(reference).nbytes());
  nnx::materialize(model, nullptr);
  for (const auto& [path, v] : nnx::state(model)) {
    INFO(path);
    CHECK_FALSE(v.value().mesh());
    CHECK(torch::equal(v.tensor(), nnx::state(reference)[path].tensor()));
  }
  // A one-process mesh works without mpirun; a whole tensor under the context is placed.
  auto mesh = nnx::make_mesh({1}, {"data"});
  nnx::MeshContext on(mesh);
  nnx::Param p(torch::arange(6.0).reshape({2, 3}), {.out_sharding = P("data")});
  CHECK(p.value().mesh() == mesh);
  CHECK(torch::equal(p.tensor().cpu(), torch::arange(6.0).reshape({2, 3})));
  // An abstract variable with no initializer cannot be materialized.
  nnx::State s;
  s.add("w", nnx::Param(nnx::Array::abstract({2, 3}, at::kFloat)));
  CHECK_THROWS_WITH(nnx::materialize(s, mesh),
                    Catch::Contains("'w'") && Catch::Contains("no initializer"));
}

namespace {
struct Placed : nnx::Module {
  explicit Placed(const nnx::Array& w) : kernel(w, {.out_sharding = P(nnx::none, "x")}) {}
  nnx::Param NNX_FIELD(kernel);
};
}  // namespace

TEST_CASE("a value placed before eval_shape keeps its blocks and materializes to its spec",
          "[ranks2]") {
  auto mesh = nnx::make_mesh({2}, {"x"});
  const auto whole = torch::arange(16.0).reshape({4, 4});
  const auto placed = nnx::device_put(whole, {mesh, P("x")});  // rows, not the spec's columns
  auto model = nnx::eval_shape([&] { return Placed(placed); });
  // Materializing onto another mesh would have to move blocks between meshes: refused by name.
  auto other = nnx::make_mesh({1, 2}, {"y", "x"});
  CHECK_THROWS_WITH(nnx::materialize(model, other),
                    Catch::Contains("'kernel' is already placed on"));
  nnx::materialize(model, mesh);
  CHECK(model.kernel.value().spec() == P(nnx::none, "x"));
  CHECK(torch::equal(nnx::gather(model.kernel.value()).cpu(), whole));
  CHECK(torch::equal(model.kernel.value().local().cpu(),
                     whole.narrow(1, 2 * nnx::world_rank(), 2)));
  // Without a mesh, materialize gives whole arrays: a sharded one is gathered.
  nnx::materialize(model, nullptr);
  CHECK_FALSE(model.kernel.value().mesh());
  CHECK(torch::equal(model.kernel.tensor().cpu(), whole));
}

TEST_CASE("a state holding blocks is written to JSON without values or refused with them",
          "[ranks2]") {
  auto mesh = nnx::make_mesh({2}, {"x"});
  nnx::State s;
  s.add("rows", nnx::Param(nnx::device_put(torch::arange(4.0).reshape({2, 2}), {mesh, P("x")})));
  s.add("whole", nnx::Param(nnx::device_put(torch::ones({2}), {mesh, P()})));
  CHECK(s.to_json()[0]["shape"] == nlohmann::json::array({2, 2}));
  // Each rank held one row under the global shape (2, 2), a different document on each rank.
  CHECK_THROWS_WITH(s.to_json(true),
                    Catch::Contains("'rows' lies on Mesh('x': 2) as PartitionSpec('x', None), so "
                                    "this rank holds a block or a pending sum, not its value; "
                                    "gather the values first"));
  nnx::State replicated;
  replicated.add("whole", s["whole"]);
  CHECK(replicated.to_json(true)[0]["value"] == nlohmann::json::array({1.0, 1.0}));
}

TEST_CASE("an initializer's error names the variable it was initializing") {
  nnx::Rngs rngs(0);
  // Fans of a 1-d bias cannot be computed: the error says whose.
  auto model = nnx::eval_shape([&] {
    return nnx::Linear(4, 8, rngs, {.bias_init = nnx::initializers::lecun_normal()});
  });
  CHECK_THROWS_WITH(nnx::materialize(model, nullptr),
                    Catch::Contains("initializing 'bias': [variance_scaling]"));
}

TEST_CASE("on a GPU mesh, materialize samples each block there, bitwise the host's values",
          "[gpu]") {
  if (nnx::cuda_device_count() == 0) {
    WARN("no CUDA device: skipped");
    return;
  }
  nnx::Rngs ref_rngs(0);
  Tower reference(ref_rngs);
  auto mesh = [] {
    nnx_test::DefaultDeviceScope on_gpu(c10::Device(c10::kCUDA, 0));
    return nnx::make_mesh({1}, {"model"});
  }();
  REQUIRE(mesh->device().is_cuda());
  nnx::LogicalAxisRules rules({{"vocab", "model"}, {"embed", nnx::none}, {"mlp", "model"}});
  nnx::Rngs rngs(0);
  auto model = nnx::eval_shape([&] { return Tower(rngs); });
  nnx::materialize(model, mesh);
  for (const auto& [path, v] : nnx::state(model)) {
    INFO(path);
    CHECK(v.value().local().is_cuda());
    CHECK(torch::equal(v.value().local().cpu(), nnx::state(reference)[path].tensor()));
  }
  // Sampled there, not on the host and copied: the initializer runs with the GPU as its
  // sampling device.
  std::optional<at::Device> seen;
  const nnx::Initializer normal = nnx::initializers::normal(1.0);
  const nnx::Initializer recording{[&](const nnx::random::Key& key, const nnx::Shape& shape,
                                       at::ScalarType dtype, const nnx::Box& block) {
    seen = nnx::random::sampling_device();
    return normal.fn(key, shape, dtype, block);
  }};
  const nnx::Array w = nnx::materialize_on(recording(nnx::random::key(1), {4, 4}), mesh, "'w'");
  REQUIRE(seen.has_value());
  CHECK(seen->is_cuda());
  CHECK(w.local().is_cuda());
}
