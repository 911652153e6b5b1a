// Restoring onto other meshes and specs: values bitwise equal, each rank reading the chunks
// that overlap its blocks whole and checking them (or, unchecked, exactly the bytes of its own
// blocks), and each distinct block written once.
#include "checkpoint_test_util.h"

namespace ckpt = nnx::checkpoint;
using nnx::none;
using nnx::P;

namespace {

// A mesh (null for one device: whole arrays) and the spec of each array on it.
struct Layout {
  std::string name;
  std::shared_ptr<const nnx::Mesh> mesh;
  nnx::PartitionSpec matrix, vector;
};

const std::vector<int64_t> kMatrixShape{16, 24};

std::map<std::string, at::Tensor> full_values() {
  return {{"matrix", torch::arange(16 * 24, torch::kFloat).reshape(kMatrixShape) * 0.5},
          {"vector", torch::arange(24, torch::kDouble) - 3},
          {"count", torch::tensor(int64_t{42})}};
}

nnx::PartitionSpec spec_for(const Layout& l, const std::string& path) {
  return path == "matrix" ? l.matrix : path == "vector" ? l.vector : P();
}

nnx::State placed(const Layout& l) {
  nnx::State s;
  for (const auto& [path, full] : full_values())
    s.add(path, nnx::Param(l.mesh ? nnx::device_put(full, {l.mesh, spec_for(l, path)})
                                  : nnx::Array(full)));
  return s;
}

nnx::State abstract_target(const Layout& l) {
  nnx::State s;
  for (const auto& [path, full] : full_values()) {
    auto a = nnx::Array::abstract(full.sizes().vec(), full.scalar_type());
    if (l.mesh) a.set_sharding(nnx::NamedSharding{l.mesh, spec_for(l, path)});
    s.add(path, nnx::Param(a));
  }
  return s;
}

int64_t global_sum(int64_t mine) {
  auto t = torch::full({1}, mine, torch::kLong);
  nnx::Communicator::world().all_reduce_(t);
  return t.item<int64_t>();
}

// Restores `dir` onto `to` and checks values, layout, and bytes read.
// The bytes of the chunks of `dir` that overlap each restored variable's local block.
int64_t overlapping_chunk_bytes(const std::string& dir, const nnx::State& restored) {
  auto manifest = nlohmann::json::parse(nnx_test::read_bytes(dir + "/manifest.json"));
  int64_t bytes = 0;
  for (const auto& v : manifest["variables"]) {
    const nnx::Box box = restored.at(v["path"].get<std::string>()).value().local_box();
    for (const auto& c : v["chunks"]) {
      bool overlaps = true;
      for (size_t d = 0; d < box.start.size(); ++d) {
        const int64_t lo = c["start"][d], size = c["shape"][d];
        overlaps = overlaps && lo < box.start[d] + box.size[d] && box.start[d] < lo + size;
      }
      if (overlaps) bytes += c["nbytes"].get<int64_t>();
    }
  }
  return bytes;
}

nnx::State restore_and_check(const std::string& dir, const Layout& to) {
  ckpt::io_counts() = {};
  auto unchecked = ckpt::restore(dir, abstract_target(to), {.verify_all_checksums = false});
  int64_t local_bytes = 0;
  for (const auto& [path, v] : unchecked) local_bytes += v.tensor().nbytes();
  // Unchecked: exactly its own blocks' bytes, no more.
  CHECK(ckpt::io_counts().bytes_read == local_bytes);
  ckpt::io_counts() = {};
  auto restored = ckpt::restore(dir, abstract_target(to));
  for (const auto& [path, v] : restored) {
    INFO(path << " onto " << to.name);
    CHECK(torch::equal(nnx::gather(v.value()).cpu(), full_values().at(path)));
    CHECK(torch::equal(v.tensor(), unchecked.at(path).tensor()));
    if (to.mesh) CHECK(v.value().spec() == nnx::pad_spec(spec_for(to, path), v.shape().size()));
  }
  // Checked (the default): every chunk it touches, whole, each verified once.
  CHECK(ckpt::io_counts().bytes_read == overlapping_chunk_bytes(dir, restored));
  return restored;
}

// {"matrix": values laid out by `sharding`}; an abstract target when `values` is undefined.
nnx::State matrix_state(const at::Tensor& values, const nnx::NamedSharding& sharding) {
  nnx::State s;
  if (values.defined()) {
    s.add("matrix", nnx::Param(nnx::device_put(values, sharding)));
  } else {
    auto a = nnx::Array::abstract(kMatrixShape, torch::kFloat);
    a.set_sharding(sharding);
    s.add("matrix", nnx::Param(a));
  }
  return s;
}

}  // namespace

TEST_CASE("checkpoints restore onto every mesh and spec, reading only each rank's blocks",
          "[ranks8]") {
  nnx_test::SharedDir dir;
  auto line = nnx::make_mesh({8}, {"x"});
  auto wide = nnx::make_mesh({2, 4}, {"a", "b"});
  auto tall = nnx::make_mesh({4, 2}, {"a", "b"});
  const Layout one{"(1)", nullptr, P(), P()};
  const std::vector<std::pair<Layout, Layout>> pairs{
      // The chain (8) -> (2,4) -> (4,2) -> (1) -> (8), each saved from the previous restore.
      {{"(8) rows", line, P("x", none), P("x")}, {"(2,4) a,b", wide, P("a", "b"), P("b")}},
      {{"(2,4) a,b", wide, P("a", "b"), P("b")}, {"(4,2) b,a", tall, P("b", "a"), P({"a", "b"})}},
      {{"(4,2) b,a", tall, P("b", "a"), P({"a", "b"})}, one},
      {one, {"(8) cols", line, P(none, "x"), P()}},
      // Further pairs, each from a fresh save.
      {{"(8) cols", line, P(none, "x"), P("x")}, {"(8) rows", line, P("x", none), P()}},
      {{"(8) replicated", line, P(), P()}, {"(2,4) b rows", wide, P("b", none), P("a")}},
      {{"(2,4) a rows", wide, P("a", none), P()}, {"(8) rows", line, P("x", none), P("x")}},
      {{"(4,2) a cols", tall, P(none, "a"), P("b")},
       {"(2,4) ba rows", wide, P({"b", "a"}, none), P({"a", "b"})}},
      {{"(2,4) ab rows", wide, P({"a", "b"}, none), P("a")}, {"(4,2) b cols", tall, P(none, "b"), P("a")}},
      {{"(4,2) ab cols", tall, P(none, {"a", "b"}), P()}, {"(4,2) ab cols", tall, P(none, {"a", "b"}), P("b")}},
  };
  int64_t full_bytes = 0;
  for (const auto& [path, t] : full_values()) full_bytes += t.nbytes();
  nnx::State carried;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto& [from, to] = pairs[i];
    INFO("pair " << i << ": " << from.name << " -> " << to.name);
    const bool chained = i >= 1 && i <= 3;
    nnx::State source = chained ? carried : placed(from);
    const std::string path = dir.sub(std::to_string(i));
    ckpt::io_counts() = {};
    ckpt::save(path, source);
    // Each distinct block is written once: the ranks together write the arrays' bytes.
    CHECK(global_sum(ckpt::io_counts().bytes_written) == full_bytes);
    carried = restore_and_check(path, to);
  }
}

TEST_CASE("a model saved on one mesh restores onto another through its logical rules",
          "[ranks4][ranks8]") {
  nnx_test::SharedDir dir;
  const int64_t n = nnx::world_size();
  auto saved_values = [&] {
    auto mesh = nnx::make_mesh({n / 2, 2}, {"data", "model"});
    nnx::LogicalAxisRules rules({{"mlp", "model"}, {"embed", none}});
    nnx::MeshContext on(mesh);
    nnx::Rngs rngs(0, {{"dropout", 1}});
    nnx_test::CkptNet model(rngs);
    ckpt::save(dir.sub("m"), nnx::state(model));
    return nnx_test::whole_values(nnx::state(model));
  }();
  auto other = nnx::make_mesh({2, n / 2}, {"data", "model"});
  nnx::LogicalAxisRules rules({{"mlp", "model"}, {"embed", "data"}});
  nnx::Rngs rngs(9);
  auto abstract = nnx::state(nnx::eval_shape([&] { return nnx_test::CkptNet(rngs); }));
  auto restored = ckpt::restore(dir.sub("m"), abstract, {.mesh = other});
  nnx_test::check_bitwise_equal(saved_values, nnx_test::whole_values(restored));
  CHECK(restored["up.kernel"].value().spec() == P("data", "model"));
  CHECK(restored["up.kernel"].tensor().numel() * n == 8 * 16);
}

TEST_CASE("a damaged byte in a chunk read in part is caught when resharding", "[ranks2]") {
  // Saved as rows over 2 ranks, restored as columns: each rank needs half of each chunk.
  nnx_test::SharedDir dir;
  auto mesh = nnx::make_mesh({2}, {"x"});
  const auto full = torch::arange(16 * 24, torch::kFloat).reshape(kMatrixShape);
  const nnx::State rows = matrix_state(full, {mesh, P("x", none)});
  ckpt::save(dir.sub("c"), rows);
  if (nnx::world_rank() == 0) {  // one byte of the last row, in the columns rank 1 restores
    const std::string shard = dir.sub("c/rank-00001.safetensors");
    auto bytes = nnx_test::read_bytes(shard);
    bytes[bytes.size() - 5] ^= 0x10;
    nnx_test::write_bytes(shard, bytes);
  }
  nnx::Communicator::world().barrier();
  const nnx::State cols = matrix_state(at::Tensor(), {mesh, P(none, "x")});
  // Every rank reads the damaged chunk whole and finds the damage, even rank 0, whose columns
  // hold none of it.
  CHECK_THROWS_WITH(ckpt::restore(dir.sub("c"), cols),
                    Catch::Matchers::Contains("fails its checksum") &&
                        Catch::Matchers::Contains("rank-00001.safetensors"));
  // Unchecked, the damage reaches rank 1's values: what the default prevents.
  auto unchecked = ckpt::restore(dir.sub("c"), cols, {.verify_all_checksums = false});
  CHECK(torch::equal(nnx::gather(unchecked["matrix"].value()).cpu(), full) == false);
}

TEST_CASE("a chunk's checksum covers its position: swapped starts are caught", "[ranks2]") {
  nnx_test::SharedDir dir;
  auto mesh = nnx::make_mesh({2}, {"x"});
  const auto full = torch::arange(16 * 24, torch::kFloat).reshape(kMatrixShape);
  const nnx::State rows = matrix_state(full, {mesh, P("x", none)});
  ckpt::save(dir.sub("c"), rows);
  ckpt::save(dir.sub("old"), rows);
  if (nnx::world_rank() == 0) {
    // Swap the two chunks' starts: every byte intact, each chunk now claims the other's rows.
    auto m = nlohmann::json::parse(nnx_test::read_bytes(dir.sub("c/manifest.json")));
    auto& chunks = m["variables"][0]["chunks"];
    std::swap(chunks[0]["start"], chunks[1]["start"]);
    nnx_test::write_bytes(dir.sub("c/manifest.json"), m.dump(1));
    // A version-1 manifest (checksums of the bytes only) is still read.
    auto old = nlohmann::json::parse(nnx_test::read_bytes(dir.sub("old/manifest.json")));
    old["version"] = 1;
    for (auto& c : old["variables"][0]["chunks"]) {
      const auto bytes = nnx_test::read_bytes(dir.sub("old/" + c["file"].get<std::string>()));
      c["crc32c"] = ckpt::crc32c(bytes.data() + c["offset"].get<size_t>(), c["nbytes"].get<size_t>());
    }
    nnx_test::write_bytes(dir.sub("old/manifest.json"), old.dump(1));
  }
  nnx::Communicator::world().barrier();
  auto target = [&] { return matrix_state(at::Tensor(), {mesh, P("x", none)}); };
  CHECK_THROWS_WITH(ckpt::restore(dir.sub("c"), target()),
                    Catch::Matchers::Contains("fails its checksum"));
  CHECK(ckpt::verify(dir.sub("c")).problems.size() == 2);
  auto restored = ckpt::restore(dir.sub("old"), target());
  CHECK(torch::equal(nnx::gather(restored["matrix"].value()).cpu(), full));
  CHECK(ckpt::verify(dir.sub("old")).problems.empty());
}
