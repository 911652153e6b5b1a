// A damaged or hostile checkpoint is a clear error naming the file and variable, never a crash
// or a silently wrong value.
#include "checkpoint_test_util.h"

using Catch::Matchers::Contains;
namespace ckpt = nnx::checkpoint;

namespace {

nnx::State sample_state() {
  nnx::State state;
  state.add("layer.kernel", nnx::Param(torch::arange(64, torch::kFloat).reshape({8, 8})));
  state.add("layer.bias", nnx::Param(torch::arange(8, torch::kFloat)));
  return state;
}

// A fresh good checkpoint in dir/name; returns its directory.
std::string good_checkpoint(const nnx_test::SharedDir& dir, const std::string& name) {
  ckpt::save(dir.sub(name), sample_state());
  return dir.sub(name);
}

nlohmann::json manifest_of(const std::string& ckpt_dir) {
  return nlohmann::json::parse(nnx_test::read_bytes(ckpt_dir + "/manifest.json"));
}
void put_manifest(const std::string& ckpt_dir, const nlohmann::json& m) {
  nnx_test::write_bytes(ckpt_dir + "/manifest.json", m.dump(1));
}
std::string shard_of(const std::string& ckpt_dir) {
  return ckpt_dir + "/" + manifest_of(ckpt_dir)["files"][0]["name"].get<std::string>();
}

}  // namespace

TEST_CASE("damaged shard files are errors naming the file") {
  nnx_test::SharedDir dir;
  const auto target = sample_state();
  SECTION("truncated") {
    auto c = good_checkpoint(dir, "t");
    auto bytes = nnx_test::read_bytes(shard_of(c));
    nnx_test::write_bytes(shard_of(c), bytes.substr(0, bytes.size() - 10));
    CHECK_THROWS_WITH(ckpt::restore(c, target),
                      Contains(shard_of(c)) && Contains("truncated or replaced"));
  }
  SECTION("a flipped byte fails the checksum") {
    auto c = good_checkpoint(dir, "f");
    auto bytes = nnx_test::read_bytes(shard_of(c));
    bytes[bytes.size() - 5] ^= 0x10;  // inside the last tensor's values
    nnx_test::write_bytes(shard_of(c), bytes);
    CHECK_THROWS_WITH(ckpt::restore(c, target),
                      Contains("fails its checksum") && Contains("layer."));
  }
  SECTION("a header over the size limit") {
    auto c = good_checkpoint(dir, "h");
    auto bytes = nnx_test::read_bytes(shard_of(c));
    const uint64_t huge = uint64_t{1} << 40;
    std::memcpy(bytes.data(), &huge, 8);
    nnx_test::write_bytes(shard_of(c), bytes);
    CHECK_THROWS_WITH(ckpt::restore(c, target), Contains(shard_of(c)) && Contains("limit"));
  }
  SECTION("a missing shard file") {
    auto c = good_checkpoint(dir, "m");
    std::filesystem::remove(shard_of(c));
    CHECK_THROWS_WITH(ckpt::restore(c, target),
                      Contains(shard_of(c)) && Contains("is missing") && Contains("layer.") &&
                          Contains("copy the file back"));
  }
}

TEST_CASE("bad manifests are errors naming the manifest and the variable") {
  nnx_test::SharedDir dir;
  const auto target = sample_state();
  auto c = good_checkpoint(dir, "c");
  const auto good = manifest_of(c);
  auto expect_error = [&](const nlohmann::json& bad, const std::string& what) {
    put_manifest(c, bad);
    CHECK_THROWS_WITH(ckpt::restore(c, target), Contains(what) && Contains("manifest.json"));
  };
  auto variable = [&](nlohmann::json& m, const std::string& path) -> nlohmann::json& {
    for (auto& v : m["variables"])
      if (v["path"] == path) return v;
    FAIL("no variable " << path);
    return m;
  };
  SECTION("unknown version") {
    auto m = good;
    m["version"] = 99;
    expect_error(m, "99");
  }
  SECTION("not JSON") {
    nnx_test::write_bytes(c + "/manifest.json", "{\"format\": \"nnx-checkpoint\", \"vers");
    CHECK_THROWS_WITH(ckpt::restore(c, target), Contains("manifest.json"));
  }
  SECTION("chunk offsets out of range") {
    auto m = good;
    variable(m, "layer.kernel")["chunks"][0]["offset"] = uint64_t{1} << 50;
    expect_error(m, "layer.kernel");
  }
  SECTION("a chunk past the array's end") {
    auto m = good;
    variable(m, "layer.kernel")["chunks"][0]["start"] = {4, 0};
    expect_error(m, "layer.kernel");
  }
  SECTION("a file name that escapes the directory") {
    auto m = good;
    m["files"][0]["name"] = "../../etc/passwd";
    for (auto& v : m["variables"]) v["chunks"][0]["file"] = "../../etc/passwd";
    expect_error(m, "../../etc/passwd");
  }
  SECTION("a wrong dtype for the chunk's bytes") {
    auto m = good;
    variable(m, "layer.bias")["dtype"] = "F64";
    expect_error(m, "layer.bias");
  }
}
