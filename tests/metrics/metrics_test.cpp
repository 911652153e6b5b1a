// flax.nnx.metrics in nnx: the values Flax's own documentation gives, masks, MultiMetric, and
// sharded inputs on every layout giving the one-device results.
#include <nnx/nnx.h>

#include "../catch_after_torch.h"
#include <torch/types.h>
#include <torch/utils.h>

#include <cmath>
#include <limits>

using Catch::Matchers::Contains;
namespace metrics = nnx::metrics;

namespace {
nnx::Array array(std::vector<double> values) { return nnx::Array(torch::tensor(values)); }
}  // namespace

TEST_CASE("Average and Welford give the values in Flax's documentation") {
  metrics::Average average;
  CHECK(std::isnan(average.compute()));
  average.update({{"values", array({1, 2, 3, 4})}});
  CHECK(average.compute() == 2.5);
  average.update({{"values", array({3, 2, 1, 0})}});
  CHECK(average.compute() == 2.0);
  average.reset();
  CHECK(std::isnan(average.compute()));

  metrics::Welford welford;
  CHECK(std::isnan(welford.compute().standard_deviation));
  welford.update({{"values", array({1, 2, 3, 4})}});
  CHECK(welford.compute().mean == 2.5);
  CHECK(welford.compute().standard_error_of_mean == Approx(0.559017).epsilon(1e-6));
  CHECK(welford.compute().standard_deviation == Approx(1.118034).epsilon(1e-6));
  welford.update({{"values", array({3, 2, 1, 0})}});
  CHECK(welford.compute().mean == 2.0);
  CHECK(welford.compute().standard_error_of_mean == Approx(0.43301272).epsilon(1e-6));
  CHECK(welford.compute().standard_deviation == Approx(1.2247449).epsilon(1e-6));
}

TEST_CASE("Accuracy gives Flax's documented values on JAX's random logits") {
  using nnx::random::key;
  auto logits = nnx::Array(nnx::random::normal(key(0), {5, 2}));
  auto logits2 = nnx::Array(nnx::random::normal(key(1), {5, 2}));
  metrics::Accuracy accuracy;
  CHECK(std::isnan(accuracy.compute()));
  accuracy.update({{"logits", logits}, {"labels", nnx::Array(torch::tensor({0, 1, 1, 1, 0}))}});
  CHECK(accuracy.compute() == Approx(0.6));
  accuracy.update({{"logits", logits2}, {"labels", nnx::Array(torch::tensor({0, 1, 1, 1, 1}))}});
  CHECK(accuracy.compute() == Approx(0.4));

  metrics::Accuracy binary(0.5);
  binary.update({{"logits", nnx::Array(nnx::random::normal(key(2), {5}))},
                 {"labels", nnx::Array(torch::tensor({0, 1, 0, 1, 1}))}});
  CHECK(binary.compute() == Approx(0.8));
}

TEST_CASE("Accuracy refuses labels shaped unlike the logits instead of broadcasting them") {
  metrics::Accuracy accuracy;
  // Four rows against one label used to count four hits over one example: accuracy 4.
  CHECK_THROWS_WITH(accuracy.update({{"logits", nnx::Array(torch::zeros({4, 3}))},
                                     {"labels", nnx::Array(torch::tensor({0}))}}),
                    Contains("multi-class classification expects labels shaped as the logits "
                             "without their last (class) dim, got logits (4, 3) and labels (1,)"));
  CHECK_THROWS_WITH(accuracy.update({{"logits", nnx::Array(torch::zeros({1, 3}))},
                                     {"labels", nnx::Array(torch::tensor({0, 1, 2, 0}))}}),
                    Contains("got logits (1, 3) and labels (4,)"));
  metrics::Accuracy binary(0.5);
  CHECK_THROWS_WITH(binary.update({{"logits", nnx::Array(torch::zeros({4}))},
                                   {"labels", nnx::Array(torch::tensor({0, 1}))}}),
                    Contains("binary classification expects labels shaped as the logits, got "
                             "logits (4,) and labels (2,)"));
  CHECK(std::isnan(accuracy.compute()));  // nothing was counted
  accuracy.update({{"logits", nnx::Array(torch::tensor({{0.f, 1.f}, {1.f, 0.f}}))},
                   {"labels", nnx::Array(torch::tensor({1, 1}))}});
  CHECK(accuracy.compute() == 0.5);
}

TEST_CASE("an empty masked batch counts nothing and leaves the running values as they were") {
  auto empty = nnx::Array(torch::zeros({0}, torch::kDouble));
  auto no_mask = nnx::Array(torch::zeros({0}));
  metrics::Average average;
  average.update({{"values", empty}, {"mask", no_mask}});
  CHECK(average.count() == 0.0);
  average.update({{"values", nnx::Array(torch::tensor({1., 3.}))},
                  {"mask", nnx::Array(torch::tensor({1.f, 1.f}))}});
  CHECK(average.compute() == 2.0);
  average.update({{"values", empty}, {"mask", no_mask}});
  CHECK(average.compute() == 2.0);
  CHECK(average.count() == 2.0);
  metrics::Welford welford;
  welford.update({{"values", nnx::Array(torch::tensor({1., 3.}))},
                  {"mask", nnx::Array(torch::tensor({1.f, 1.f}))}});
  welford.update({{"values", empty}, {"mask", no_mask}});
  CHECK(welford.compute().mean == 2.0);
  CHECK(welford.compute().standard_deviation == 1.0);
}

TEST_CASE("a mask leaves out padded examples") {
  auto logits = nnx::Array(torch::tensor({{1.f, 0.f}, {0.f, 1.f}, {1.f, 0.f}, {1.f, 0.f}}));
  auto labels = nnx::Array(torch::tensor({0, 1, 1, 1}));
  auto mask = nnx::Array(torch::tensor({1.f, 1.f, 0.f, 0.f}));
  metrics::Accuracy accuracy;
  accuracy.update({{"logits", logits}, {"labels", labels}, {"mask", mask}});
  CHECK(accuracy.compute() == 1.0);
  metrics::Average average;
  average.update({{"values", nnx::Array(torch::tensor({{1., 3.}, {5., 7.}}))},
                  {"mask", nnx::Array(torch::tensor({0.f, 1.f}))}});
  CHECK(average.compute() == 6.0);  // the mask covers each row's trailing dims
  CHECK(average.count() == 2.0);
  CHECK_THROWS_WITH(average.update({{"values", array({1})}, {"mask", array({1, 1})}}),
                    Contains("must match the leading dims of the values"));
  CHECK_THROWS_WITH(average.update({{"values", array({1})}, {"mask", nnx::Array()}}),
                    Contains("the input 'mask' holds no values"));
  CHECK(average.count() == 2.0);  // neither bad update counted
  // A padded row's NaN or inf is left out with it; an unmasked NaN still shows.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  metrics::Average padded;
  padded.update({{"values", nnx::Array(torch::tensor({2., nan, 4., inf}))},
                 {"mask", nnx::Array(torch::tensor({1.f, 0.f, 1.f, 0.f}))}});
  CHECK(padded.compute() == 3.0);
  metrics::Welford spread;
  spread.update({{"values", nnx::Array(torch::tensor({2., nan, 4.}))},
                 {"mask", nnx::Array(torch::tensor({true, false, true}))}});
  CHECK(spread.compute().mean == 3.0);
  CHECK(spread.compute().standard_deviation == 1.0);
  metrics::Average unmasked;
  unmasked.update({{"values", nnx::Array(torch::tensor({2., nan}))},
                   {"mask", nnx::Array(torch::tensor({1.f, 1.f}))}});
  CHECK(std::isnan(unmasked.compute()));
}

TEST_CASE("MultiMetric updates each metric with the inputs it takes") {
  metrics::MultiMetric all({{"loss", metrics::Average("loss")}, {"accuracy", metrics::Accuracy()},
                            {"spread", metrics::Welford("loss")}});
  all.update({{"loss", array({0.5, 1.5})},
              {"logits", nnx::Array(torch::tensor({{2.f, 1.f}, {0.f, 3.f}}))},
              {"labels", nnx::Array(torch::tensor({0, 0}))}});
  auto results = all.compute();
  CHECK(results.at("loss") == 1.0);
  CHECK(results.at("accuracy") == 0.5);
  CHECK(results.at("spread.mean") == 1.0);
  CHECK(results.at("spread.standard_deviation") == 0.5);
  metrics::MultiMetric copy = all;
  all.reset();
  CHECK(std::isnan(all.compute().at("loss")));
  CHECK(copy.compute().at("loss") == 1.0);  // a copy owns its own metrics
  CHECK_THROWS_WITH(all.update({{"values", array({1})}}),
                    Contains("Average needs the input 'loss', given {values}"));
  CHECK_THROWS_WITH((metrics::MultiMetric{{"a", metrics::Average()}, {"a", metrics::Accuracy()}}),
                    Contains("the name 'a' is used twice"));
}

TEST_CASE("a metric's state restores its accumulators, refusing a state that lacks one") {
  metrics::MultiMetric all({{"loss", metrics::Average("loss")}, {"spread", metrics::Welford("loss")}});
  all.update({{"loss", array({0.5, 1.5, 4.0})}});
  nnx::State saved = all.state();
  CHECK(saved.paths() == std::vector<std::string>{"loss.total", "loss.count", "spread.count",
                                                  "spread.mean", "spread.m2"});
  CHECK(saved.at("loss.count").is<metrics::MetricState>());
  metrics::MultiMetric restored({{"loss", metrics::Average("loss")}, {"spread", metrics::Welford("loss")}});
  restored.load_state(saved);
  CHECK(restored.compute() == all.compute());
  restored.update({{"loss", array({2.0})}});
  all.update({{"loss", array({2.0})}});
  CHECK(restored.compute() == all.compute());
  metrics::Average other("loss");
  other.update({{"loss", array({9.0})}});
  CHECK_THROWS_WITH(other.load_state(metrics::Welford().state()),
                    Contains("the metric state has no 'total'"));
  CHECK(other.compute() == 9.0);
}

TEST_CASE("metrics of sharded inputs equal the one-device metrics on every layout", "[ranks4]") {
  auto mesh = nnx::make_mesh({2, 2}, {"data", "model"});
  torch::manual_seed(0);  // the same values on every rank
  auto logits = torch::randn({8, 6});
  auto labels = torch::randint(6, {8}, torch::kLong);
  auto losses = torch::rand({8}) * 3;
  auto mask = torch::tensor({1.f, 1.f, 1.f, 0.f, 1.f, 0.f, 1.f, 1.f});
  losses[3] = std::numeric_limits<float>::quiet_NaN();  // padded rows: left out, not NaN
  losses[5] = std::numeric_limits<float>::infinity();
  auto one_device = [&](metrics::MultiMetric m) {
    m.update({{"loss", nnx::Array(losses)}, {"logits", nnx::Array(logits)},
              {"labels", nnx::Array(labels)}, {"mask", nnx::Array(mask)}});
    return m.compute();
  };
  metrics::MultiMetric fresh({{"loss", metrics::Average("loss")}, {"accuracy", metrics::Accuracy()},
                              {"spread", metrics::Welford("loss")}});
  const auto expected = one_device(fresh);
  CHECK(expected.at("accuracy") > 0.0);
  for (const auto& [name, value] : expected) CHECK(std::isfinite(value));

  using nnx::P;
  struct Layout { nnx::PartitionSpec rows, logits; };
  for (const auto& layout : {Layout{P("data"), P("data", nnx::none)},
                             Layout{P("data"), P("data", "model")},  // classes split too
                             Layout{P({"data", "model"}), P({"data", "model"}, nnx::none)},
                             Layout{P(), P(nnx::none, "model")}}) {
    auto place = [&](const torch::Tensor& t, const nnx::PartitionSpec& spec) {
      return nnx::device_put(t, {mesh, spec});
    };
    metrics::MultiMetric sharded = fresh;
    sharded.update({{"loss", place(losses, layout.rows)}, {"logits", place(logits, layout.logits)},
                    {"labels", place(labels, layout.rows)}, {"mask", place(mask, layout.rows)}});
    auto got = sharded.compute();
    INFO(layout.logits.to_string());
    for (const auto& [name, value] : expected) CHECK(got.at(name) == Approx(value).epsilon(1e-12));
    // One of logits and labels on no mesh (whole on every rank), the other placed: it used to
    // compare a block with whole rows, or fail in redistribute.
    metrics::Accuracy mixed, mixed_other_way;
    mixed.update({{"logits", place(logits, layout.logits)}, {"labels", nnx::Array(labels)},
                  {"mask", place(mask, layout.rows)}});
    mixed_other_way.update({{"logits", nnx::Array(logits)}, {"labels", place(labels, layout.rows)},
                            {"mask", place(mask, layout.rows)}});
    CHECK(mixed.compute() == Approx(expected.at("accuracy")).epsilon(1e-12));
    CHECK(mixed_other_way.compute() == Approx(expected.at("accuracy")).epsilon(1e-12));
  }
}
