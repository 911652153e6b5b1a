// DataLoader: the sampler's batches, padding with a mask, per-process rows placed on the mesh, a
// map step, and a state that resumes with exactly the batches an uninterrupted run sees.
#include <nnx/nnx.h>

#include "data_test_util.h"

#include "../catch_after_torch.h"
#include <torch/types.h>

#include <atomic>

using Catch::Matchers::Contains;
using nnx::data::DataLoader;
using nnx::data::GlobalBatchSampler;
using nnx::data::Remainder;
using nnx::data::TensorSource;

namespace {

// A source that counts the records it was asked for.
class CountingSource : public TensorSource {
 public:
  using TensorSource::TensorSource;
  at::Tensor read(const std::vector<int64_t>& indices) const override {
    records_read += static_cast<int64_t>(indices.size());
    return TensorSource::read(indices);
  }
  mutable std::atomic<int64_t> records_read{0};
};

torch::Tensor features(int64_t n) { return torch::arange(n * 3, torch::kFloat).reshape({n, 3}); }

DataLoader::Sources sources(int64_t n) {
  return {{"x", std::make_shared<TensorSource>(features(n))},
          {"y", std::make_shared<TensorSource>(torch::arange(n))}};
}

torch::Tensor rows_of(const torch::Tensor& table, const std::vector<int64_t>& records) {
  return table.index_select(0, torch::tensor(records, torch::kLong));
}

}  // namespace

TEST_CASE("a loader returns the sampler's batches, then ends each epoch once") {
  DataLoader loader(sources(10), {.global_batch = 4, .seed = 5});
  GlobalBatchSampler reference(10, {.global_batch = 4, .seed = 5});
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    for (int64_t step = 0; step < 2; ++step) {
      auto batch = loader.next();
      REQUIRE(batch);
      CHECK(batch->epoch == epoch);
      CHECK(batch->step == step);
      auto records = reference.batch(epoch, step);
      CHECK(torch::equal((*batch)["y"].local(), torch::tensor(records, torch::kLong)));
      CHECK(torch::equal((*batch)["x"].local(), rows_of(features(10), records)));
      CHECK(torch::equal(batch->mask.local(), torch::ones({4})));
    }
    CHECK_FALSE(loader.next());
    CHECK(loader.epoch() == epoch + 1);
    CHECK(loader.position() == 0);
  }
}

TEST_CASE("padding fills the last batch with zero rows and mask 0") {
  DataLoader loader(sources(10), {.global_batch = 4, .shuffle = false,
                                  .remainder = Remainder::pad});
  CHECK(loader.steps_per_epoch() == 3);
  loader.next();
  loader.next();
  auto last = loader.next();
  REQUIRE(last);
  CHECK(torch::equal((*last)["y"].local(), torch::tensor({8, 9, 0, 0}, torch::kLong)));
  CHECK(torch::equal((*last)["x"].local()[3], torch::zeros({3})));
  CHECK(torch::equal(last->mask.local(), torch::tensor({1.f, 1.f, 0.f, 0.f})));
  CHECK_FALSE(loader.next());
}

TEST_CASE("map runs on each process's rows before they become Arrays") {
  DataLoader loader(sources(8), {.global_batch = 4, .shuffle = false,
                                 .map = [](std::map<std::string, at::Tensor>& rows) {
                                   rows["x"] = rows["x"] / 2;
                                   rows["x_sum"] = rows["x"].sum(1);
                                 }});
  auto batch = loader.next();
  REQUIRE(batch);
  CHECK(torch::equal((*batch)["x"].local(), features(8).slice(0, 0, 4) / 2));
  CHECK(torch::equal((*batch)["x_sum"].local(), (features(8).slice(0, 0, 4) / 2).sum(1)));
  CHECK_THROWS_WITH((*batch)["z"], Contains("the batch has no field 'z'; its fields are x, x_sum, y"));
}

TEST_CASE("a restored loader state continues with the uninterrupted run's batches") {
  for (int prefetch : {0, 2}) {
    DataLoader a(sources(10), {.global_batch = 4, .seed = 11, .prefetch = prefetch});
    for (int i = 0; i < 4; ++i) a.next();  // epoch 0's two batches, its end, epoch 1's first
    REQUIRE(a.epoch() == 1);
    nnx::State saved = a.state();
    std::vector<torch::Tensor> expected;
    for (int i = 0; i < 4; ++i)
      if (auto b = a.next()) expected.push_back((*b)["y"].local());
    // Another seed and prefetch depth: the state's seed and position win.
    DataLoader b(sources(10), {.global_batch = 4, .seed = 99, .prefetch = 2 - prefetch});
    b.next();
    b.load_state(saved);
    CHECK(b.epoch() == 1);
    CHECK(b.position() == 1);
    std::vector<torch::Tensor> got;
    for (int i = 0; i < 4; ++i)
      if (auto batch = b.next()) got.push_back((*batch)["y"].local());
    REQUIRE(got.size() == expected.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(torch::equal(got[i], expected[i]));
  }
}

TEST_CASE("a loader state from another batch size or dataset is refused, changing nothing") {
  DataLoader a(sources(10), {.global_batch = 4});
  DataLoader b(sources(10), {.global_batch = 2});
  b.next();
  CHECK_THROWS_WITH(b.load_state(a.state()),
                    Contains("saved by a loader of global_batch 4 over 10 records, but this one "
                             "has global_batch 2 over 10"));
  CHECK(b.position() == 1);
  nnx::State partial = a.state();
  nnx::State missing;
  for (const auto& [path, v] : partial)
    if (path != "position") missing.add(path, v);
  CHECK_THROWS_WITH(a.load_state(missing), Contains("the loader state has no 'position'"));
}

TEST_CASE("a loader state from another order or remainder is refused, changing nothing") {
  DataLoader shuffled(sources(10), {.global_batch = 4, .shuffle = true});
  DataLoader in_order(sources(10), {.global_batch = 4, .shuffle = false});
  DataLoader padded(sources(10), {.global_batch = 4, .remainder = Remainder::pad});
  in_order.next();
  CHECK_THROWS_WITH(in_order.load_state(shuffled.state()),
                    Contains("saved by a loader with shuffle = true, but this one has shuffle = "
                             "false; resume with the same LoaderOptions.shuffle"));
  CHECK(in_order.position() == 1);
  CHECK_THROWS_WITH(padded.load_state(shuffled.state()),
                    Contains("remainder = Remainder::drop, but this one has remainder = "
                             "Remainder::pad"));
  // A state saved before shuffle and remainder were kept still loads.
  nnx::State older;
  for (const auto& [path, v] : shuffled.state())
    if (path != "shuffle" && path != "remainder") older.add(path, v);
  CHECK_NOTHROW(in_order.load_state(older));
  CHECK(in_order.position() == 0);
}

TEST_CASE("a slice of a source reads its own range of records") {
  auto table = std::make_shared<TensorSource>(features(10), "table");
  auto middle = nnx::data::slice(table, 2, 6);
  CHECK(middle->size() == 4);
  CHECK(torch::equal(middle->read({0, 3}), rows_of(features(10), {2, 5})));
  CHECK(middle->name() == "table[2:6]");
  CHECK_THROWS_WITH(middle->read({4}), Contains("table[2:6]: record 4 is out of range [0, 4)"));
  CHECK_THROWS_WITH(nnx::data::slice(table, 5, 11),
                    Contains("table: the slice [5, 11) does not fit its 10 records"));
}

namespace {
// Fails on the first read of record 5, then reads normally (a passing I/O error).
class FlakySource : public TensorSource {
 public:
  using TensorSource::TensorSource;
  at::Tensor read(const std::vector<int64_t>& indices) const override {
    for (int64_t i : indices)
      if (i == 5 && !failed_.exchange(true)) throw nnx::Error("transient read error at record 5");
    return TensorSource::read(indices);
  }

 private:
  mutable std::atomic<bool> failed_{false};
};
}  // namespace

TEST_CASE("a read error is thrown by next, and the next call reads that batch again") {
  for (int prefetch : {0, 2}) {
    DataLoader loader({{"y", std::make_shared<FlakySource>(torch::arange(8))}},
                      {.global_batch = 2, .shuffle = false, .prefetch = prefetch});
    REQUIRE(loader.next());
    REQUIRE(loader.next());
    CHECK_THROWS_WITH(loader.next(), Contains("transient read error at record 5"));
    CHECK(loader.position() == 2);
    auto retried = loader.next();  // used to wait forever with a prefetch thread
    REQUIRE(retried);
    CHECK(torch::equal((*retried)["y"].local(), torch::tensor({4, 5}, torch::kLong)));
  }
}

TEST_CASE("an error placing a batch is thrown by next, and the next call returns that batch") {
  // The rows are read (and prefetched) before they are placed: a field the mesh cannot take
  // fails in placement, after the prefetcher has handed the rows over.
  auto mesh = nnx::make_mesh({1}, {"data"});
  for (int prefetch : {0, 2}) {
    std::atomic<int> maps{0};
    DataLoader loader({{"y", std::make_shared<TensorSource>(torch::arange(8))}},
                      {.global_batch = 2, .sharding = nnx::NamedSharding{mesh, nnx::P("data")},
                       .shuffle = false,
                       .prefetch = prefetch,
                       .map = [&maps](std::map<std::string, at::Tensor>& rows) {
                         if (maps++ == 0) rows["scalar"] = torch::scalar_tensor(1.0);
                       }});
    CHECK_THROWS(loader.next());
    CHECK(loader.position() == 0);
    for (int64_t step = 0; step < 4; ++step) {  // used to skip a batch, then wait forever
      auto batch = loader.next();
      REQUIRE(batch);
      CHECK(batch->step == step);
      CHECK(torch::equal((*batch)["y"].local(), torch::arange(2 * step, 2 * step + 2)));
    }
    CHECK_FALSE(loader.next());
  }
}

TEST_CASE("sources of different lengths and bad options are errors naming them") {
  CHECK_THROWS_WITH(DataLoader({{"x", std::make_shared<TensorSource>(features(10), "images")},
                                {"y", std::make_shared<TensorSource>(torch::arange(9), "labels")}},
                               {.global_batch = 2}),
                    Contains("source 'y' (labels) holds 9 records but 'x' (images) holds 10"));
  CHECK_THROWS_WITH(DataLoader(sources(10), {.global_batch = 2, .prefetch = -1}),
                    Contains("prefetch must be non-negative"));
  CHECK_THROWS_WITH(DataLoader({{"mask", std::make_shared<TensorSource>(features(4))}},
                               {.global_batch = 2}),
                    Contains("a source may not be called 'mask'"));
  // A null first source used to be called for its size before any check.
  CHECK_THROWS_WITH(DataLoader({{"x", nullptr}}, {.global_batch = 2}),
                    Contains("source 'x' is null"));
}

TEST_CASE("a token file yields windows of seq_len + 1 tokens, read by offset") {
  nnx_test::ScratchDir dir("tokens");
  const std::string text = "abcdefghij";
  nnx_test::write_bytes(dir.file("t.txt"), {text.begin(), text.end()});
  nnx::data::TokenFile all(dir.file("t.txt"), {.seq_len = 3});
  REQUIRE(all.size() == 3);  // abcd, defg, ghij
  auto windows = all.read({0, 2});
  CHECK(windows.scalar_type() == torch::kLong);
  CHECK(torch::equal(windows[0], torch::tensor({'a', 'b', 'c', 'd'}, torch::kLong)));
  CHECK(torch::equal(windows[1], torch::tensor({'g', 'h', 'i', 'j'}, torch::kLong)));
  nnx::data::TokenFile part(dir.file("t.txt"), {.seq_len = 3, .stride = 1, .begin = 2, .end = 8});
  REQUIRE(part.size() == 3);  // cdef, defg, efgh
  CHECK(torch::equal(part.read({2})[0], torch::tensor({'e', 'f', 'g', 'h'}, torch::kLong)));
  CHECK_THROWS_WITH(nnx::data::TokenFile(dir.file("t.txt"), {.seq_len = 10}),
                    Contains("10 tokens cannot fill one record of seq_len + 1 = 11 tokens"));
  CHECK_THROWS_WITH(nnx::data::TokenFile(dir.file("t.txt"), {.seq_len = 2, .end = 11}),
                    Contains("the token range [0, 11) does not fit the file's 10 tokens"));
  // 2-byte tokens are unsigned, little-endian: FF FF is 65535, 02 01 is 258, 00 80 is 32768.
  nnx_test::write_bytes(dir.file("wide.bin"), {0xFF, 0xFF, 0x02, 0x01, 0x00, 0x80});
  nnx::data::TokenFile wide(dir.file("wide.bin"), {.seq_len = 2, .token_dtype = torch::kShort});
  CHECK(torch::equal(wide.read({0})[0], torch::tensor({65535, 258, 32768}, torch::kLong)));
  nnx_test::write_bytes(dir.file("odd.bin"), {1, 2, 3});
  CHECK_THROWS_WITH(nnx::data::TokenFile(dir.file("odd.bin"),
                                         {.seq_len = 1, .token_dtype = torch::kShort}),
                    Contains("3 bytes is not a whole number of 2-byte tokens"));
}

TEST_CASE("each process reads only its data coordinate's rows, placed on the mesh", "[ranks4]") {
  auto mesh = nnx::make_mesh({2, 2}, {"data", "model"});
  const auto table = features(16);
  for (auto spec : {nnx::P("data"), nnx::P({"data", "model"})}) {
    const int64_t shards = spec[0].names().size() == 1 ? 2 : 4;
    auto counting = std::make_shared<CountingSource>(table);
    DataLoader loader({{"x", counting}}, {.global_batch = 8, .sharding = nnx::NamedSharding{mesh, spec},
                                          .seed = 3, .prefetch = 1});
    GlobalBatchSampler reference(16, {.global_batch = 8, .seed = 3});
    const int64_t index = shards == 2 ? mesh->coordinate("data")
                                      : mesh->coordinate("data") * 2 + mesh->coordinate("model");
    CHECK(loader.local_rows() == std::pair<int64_t, int64_t>{index * 8 / shards, 8 / shards});
    for (int64_t step = 0; step < 2; ++step) {
      auto batch = loader.next();
      REQUIRE(batch);
      const nnx::Array& x = (*batch)["x"];
      CHECK(x.shape() == nnx::Shape{8, 3});
      CHECK(x.spec() == nnx::P(spec[0], nnx::none));
      auto records = reference.batch(0, step);
      CHECK(torch::equal(nnx::gather(x).cpu(), rows_of(table, records)));
      std::vector<int64_t> mine(records.begin() + index * 8 / shards,
                                records.begin() + (index + 1) * 8 / shards);
      CHECK(torch::equal(x.local().cpu(), rows_of(table, mine)));
    }
    CHECK(counting->records_read == 2 * 8 / shards);
  }
  CHECK_THROWS_WITH(DataLoader(sources(16), {.global_batch = 6,
                                             .sharding = nnx::NamedSharding{mesh, nnx::P({"data", "model"})}}),
                    Contains("global_batch 6 is not divisible by the 4 shards of the batch dim") &&
                        Contains("choose a multiple of 4"));
  CHECK_THROWS_WITH(DataLoader(sources(16), {.global_batch = 8,
                                             .sharding = nnx::NamedSharding{mesh, nnx::P("data", "model")}}),
                    Contains("only the batch dim (dim 0) may be split"));
}
