// nnx::Rngs against flax.nnx.Rngs semantics and JAX's key functions.
#include "../catch_after_torch.h"

#include "test_modules.h"

namespace jr = nnx::random;
using Catch::Matchers::Contains;

TEST_CASE("each call of a stream folds in its count and increments it") {
  nnx::Rngs rngs(0);
  auto base = jr::key(0);
  CHECK(rngs() == jr::fold_in(base, 0));
  CHECK(rngs.params() == jr::fold_in(base, 1));  // no params stream: falls back to default
  CHECK(rngs("anything") == jr::fold_in(base, 2));
  CHECK(rngs.stream("default").counter() == 3);
  // JAX's published fold_in(key(0), 0) is the first key of Rngs(0).
  nnx::Rngs fresh(0);
  CHECK(jr::key_data(fresh()) == std::array<uint32_t, 2>{1797259609u, 2579123966u});
}

TEST_CASE("named streams count independently") {
  nnx::Rngs rngs(0, {{"params", 1}, {"dropout", 2}});
  CHECK(rngs.params() == jr::fold_in(jr::key(1), 0));
  CHECK(rngs.params() == jr::fold_in(jr::key(1), 1));
  CHECK(rngs.dropout() == jr::fold_in(jr::key(2), 0));
  CHECK(rngs() == jr::fold_in(jr::key(0), 0));
  CHECK(rngs.stream_names() == std::vector<std::string>{"default", "dropout", "params"});
}

TEST_CASE("a stream that is missing without a default is an error naming the fix") {
  nnx::Rngs rngs(std::map<std::string, int64_t>{{"params", 0}});
  CHECK_THROWS_WITH(rngs.dropout(), Contains("no RngStream named 'dropout'") && Contains("params"));
}

TEST_CASE("fork seeds each new stream with the next key of the old one") {
  nnx::Rngs rngs(0, {{"params", 1}});
  auto forked = rngs.fork();
  CHECK(rngs.stream("params").counter() == 1);
  auto seed = jr::fold_in(jr::key(1), 0);
  CHECK(forked.params() == jr::fold_in(seed, 0));
  CHECK(forked.stream("default").base_key() == jr::fold_in(jr::key(0), 0));
}

TEST_CASE("split gives n Rngs whose keys are split(next key, n)") {
  nnx::Rngs rngs(3);
  auto parts = rngs.split(4);
  REQUIRE(parts.size() == 4);
  auto keys = jr::split(jr::fold_in(jr::key(3), 0), 4);
  for (int i = 0; i < 4; ++i) CHECK(parts[i].stream("default").base_key() == keys[i]);
  CHECK(rngs.stream("default").counter() == 1);
}

TEST_CASE("stream keys and counts are RngState variables in the state") {
  struct WithRngs : nnx::Module {
    nnx::Rngs NNX_FIELD(rngs);
    WithRngs() : rngs(0, {{"dropout", 5}}) {}
  } holder;
  holder.rngs.dropout();
  auto counts = nnx::state(holder, nnx::OfType<nnx::RngCount>);
  CHECK(counts.paths() == std::vector<std::string>{"rngs.default.count", "rngs.dropout.count"});
  CHECK(counts["rngs.dropout.count"].tensor().item<int64_t>() == 1);
  auto keys = nnx::state(holder, nnx::OfType<nnx::RngKey>);
  CHECK(keys["rngs.dropout.key"].tensor()[1].item<int64_t>() == 5);
  // Restoring a saved count replays the stream.
  auto saved = nnx::clone(holder);
  auto next = holder.rngs.dropout();
  nnx::update(holder, nnx::state(saved, nnx::OfType<nnx::RngCount>));
  CHECK(holder.rngs.dropout() == next);
}
