// get_partition_spec / get_named_sharding with per-variable and scoped logical rules.
#include "../catch_after_torch.h"

#include "../framework/test_modules.h"

using Catch::Matchers::Contains;

namespace {
struct Block : nnx::Module {
  nnx::Param NNX_FIELD(up);
  nnx::Param NNX_FIELD(down);
  nnx::Param NNX_FIELD(scale);
  explicit Block(nnx::Rngs& rngs)
      : up(nnx::with_partitioning(nnx::initializers::lecun_normal(), nnx::P("embed", "mlp"))(
            rngs.params(), {8, 16})),
        down(nnx::initializers::lecun_normal()(rngs.params(), {16, 8}),
             {.out_sharding = nnx::P("mlp", "embed"),
              .sharding_rules = nnx::ShardingRules{{"mlp", "model"}}}),
        scale(nnx::initializers::ones()(rngs.params(), {8})) {}
};
}  // namespace

TEST_CASE("specs resolve logical names through variable and scoped rules") {
  nnx::Rngs rngs(0);
  Block block(rngs);
  auto state = nnx::state(block);
  auto plain = nnx::get_partition_spec(state);
  CHECK(plain[0].second == nnx::P("embed", "mlp"));  // no rule: names kept
  CHECK(plain[1].second == nnx::P("model", "embed"));
  CHECK(plain[2].second == nnx::P(nnx::none));
  {
    nnx::LogicalAxisRules rules({{"embed", nnx::none}, {"mlp", "model"}});
    auto specs = nnx::get_partition_spec(state);
    CHECK(specs[0].second == nnx::P(nnx::none, "model"));
    CHECK(specs[1].second == nnx::P("model", nnx::none));
    auto mesh = std::make_shared<nnx::Mesh>(std::vector<int64_t>{2, 4},
                                            std::vector<std::string>{"data", "model"});
    auto shardings = nnx::get_named_sharding(state, mesh);
    CHECK(shardings[0].first == "up");
    CHECK(shardings[0].second.spec == nnx::P(nnx::none, "model"));
  }
  CHECK(nnx::current_logical_axis_rules().empty());
}

TEST_CASE("conflicting rules are errors, never last-one-wins") {
  nnx::Rngs rngs(0);
  Block block(rngs);
  nnx::LogicalAxisRules outer({{"mlp", "data"}});
  CHECK_THROWS_WITH(nnx::get_partition_spec(nnx::state(block)),
                    Contains("conflicting sharding rules in 'down'") && Contains("'mlp'"));
  CHECK_THROWS_WITH(nnx::LogicalAxisRules({{"mlp", "model"}}), Contains("conflicting"));
  CHECK_NOTHROW(nnx::LogicalAxisRules({{"mlp", "data"}}));  // the same rule again is fine
}

TEST_CASE("bad specs name the variable path and the fix") {
  nnx::Rngs rngs(0);
  Block block(rngs);
  auto state = nnx::state(block);
  auto mesh = std::make_shared<nnx::Mesh>(std::vector<int64_t>{2, 3},
                                          std::vector<std::string>{"data", "model"});
  CHECK_THROWS_WITH(nnx::get_named_sharding(state, mesh),
                    Contains("up: PartitionSpec('embed', 'mlp') names axis 'embed'") &&
                        Contains("add a sharding rule"));
  nnx::LogicalAxisRules rules({{"embed", "data"}, {"mlp", "model"}});
  // 16 is not divisible by model=3.
  CHECK_THROWS_WITH(nnx::get_named_sharding(state, mesh),
                    Contains("up: dim 1 of size 16 is not divisible by 3"));
  nnx::LogicalAxisRules more({{"vocab", "data"}});
  nnx::Param twice(torch::zeros({4, 4}), {.out_sharding = nnx::P("embed", "vocab")});
  nnx::State s;
  s.add("table", twice);
  CHECK_THROWS_WITH(nnx::get_named_sharding(s, mesh), Contains("table") && Contains("'data' twice"));
}
