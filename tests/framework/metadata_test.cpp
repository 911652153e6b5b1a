// Metadata, PartitionSpec and the with_partitioning / with_metadata wrappers.
#include "../catch_after_torch.h"

#include "test_modules.h"

using Catch::Matchers::Contains;

TEST_CASE("a PartitionSpec takes names, none and tuples") {
  auto spec = nnx::P("data", nnx::none, nnx::SpecEntry{"fsdp", "model"});
  CHECK(spec.size() == 3);
  CHECK(spec[1].is_none());
  CHECK(spec[2].names() == std::vector<std::string>{"fsdp", "model"});
  CHECK(spec.to_string() == "PartitionSpec('data', None, ('fsdp', 'model'))");
  auto braces = nnx::P("data", {"fsdp", "model"}, nullptr);
  CHECK(braces.to_string() == "PartitionSpec('data', ('fsdp', 'model'), None)");
  CHECK(spec.axis_names() == std::vector<std::string>{"data", "fsdp", "model"});
  // A braced list is one dim split over several axes, as a tuple in JAX.
  auto tuple = nnx::P({"i", "j"});
  CHECK(tuple.size() == 1);
  CHECK(tuple.to_string() == "PartitionSpec(('i', 'j'))");
  CHECK(nnx::P({"b", "a"}, nnx::none).to_string() == "PartitionSpec(('b', 'a'), None)");
}

TEST_CASE("metadata round-trips through JSON, free-form entries included") {
  nnx::Metadata m{.out_sharding = nnx::P("batch", nnx::none),
                  .sharding_rules = nnx::ShardingRules{{"batch", "data"}, {"hidden", {"fsdp", "model"}}},
                  .optimizer_sharding = nnx::P("data", nnx::none),
                  .extra = {{"note", "tied"}, {"scale", 0.5}}};
  auto j = m.to_json();
  CHECK(j["out_sharding"] == nlohmann::json::parse(R"(["batch", null])"));
  CHECK(j["sharding_rules"][1] == nlohmann::json::parse(R"(["hidden", ["fsdp", "model"]])"));
  CHECK(j["note"] == "tied");
  CHECK(nnx::Metadata::from_json(j) == m);
  CHECK_THROWS_WITH(nnx::Metadata::from_json(nlohmann::json::parse(R"({"sharding_rules": [["a"]]})")),
                    Contains("a sharding rule is [logical, mesh]"));
}

TEST_CASE("merged metadata takes the entries the override sets") {
  nnx::Metadata base{.out_sharding = nnx::P("a"), .extra = {{"k", 1}, {"keep", true}}};
  nnx::Metadata over{.optimizer_sharding = nnx::P("data"), .extra = {{"k", 2}}};
  auto m = base.merged_with(over);
  CHECK(m.out_sharding == nnx::P("a"));
  CHECK(m.optimizer_sharding == nnx::P("data"));
  CHECK(m.extra["k"] == 2);
  CHECK(m.extra["keep"] == true);
  CHECK(nnx::Metadata{}.empty());
  CHECK_FALSE(m.empty());
}

TEST_CASE("with_partitioning and with_metadata annotate the variables an initializer makes") {
  nnx::Rngs rngs(0);
  auto init = nnx::with_metadata(
      nnx::with_partitioning(nnx::initializers::lecun_normal(), nnx::P("embed", "mlp")),
      {.sharding_rules = nnx::ShardingRules{{"embed", nnx::none}, {"mlp", "model"}}});
  nnx_test::Dense layer(3, 4, rngs, init, {.extra = {{"tag", "ffn"}}});
  const auto& m = layer.kernel.metadata();
  CHECK(m.out_sharding == nnx::P("embed", "mlp"));
  CHECK(m.sharding_rules->at(1).mesh == nnx::SpecEntry("model"));
  CHECK(m.extra["tag"] == "ffn");
  CHECK(layer.bias.metadata().empty());
  // The values are those of the plain initializer: metadata changes nothing else.
  nnx::Rngs again(0);
  nnx_test::Dense plain(3, 4, again);
  CHECK(torch::equal(layer.kernel.tensor(), plain.kernel.tensor()));
}

TEST_CASE("a mesh checks its axes") {
  nnx::Mesh mesh({2, 4}, {"data", "model"});
  CHECK(mesh.size() == 8);
  CHECK(mesh.axis_size("model") == 4);
  CHECK(mesh.to_string() == "Mesh('data': 2, 'model': 4)");
  CHECK_THROWS_WITH(mesh.axis_index("batch"), Contains("unknown mesh axis 'batch'") && Contains("data, model"));
  CHECK_THROWS_WITH(nnx::Mesh({2, 2}, {"x", "x"}), Contains("'x' is used twice"));
  CHECK_THROWS_WITH(nnx::Mesh({2}, {"x", "y"}), Contains("differ in length"));
}
