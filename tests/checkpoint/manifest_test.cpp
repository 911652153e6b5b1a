// Manifest round trips, reading from a directory, and every rejection of parse_manifest: each
// error names the manifest file and, where there is one, the variable path.
#include "../catch_after_torch.h"

#include <nnx/checkpoint/file_io.h>
#include <nnx/checkpoint/manifest.h>
#include <nnx/core/error.h>

#include <functional>

#include "format_test_util.h"

using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using Catch::Matchers::StartsWith;
using namespace nnx::checkpoint;
using Json = nlohmann::json;

namespace {

const std::string kFile = "ckpt/manifest.json";
const std::string kKernel = "variable 'blocks.0.kernel' in 'ckpt/manifest.json'";

// Two ranks; a kernel sharded by rows over mesh axis "data", a replicated bias, a scalar.
Manifest sample() {
  Manifest m;
  m.world_size = 2;
  m.files = {{"shard-0.safetensors", 1000}, {"shard-1.safetensors", 1000}};
  m.variables.push_back(
      {"blocks.0.kernel",
       "Param",
       "F32",
       {4, 6},
       Json::array({"data", nullptr}),
       MeshRecord{{"data"}, {2}},
       Json{{"sharding_names", {"embed", "hidden"}}},
       {{"shard-0.safetensors", "blocks.0.kernel", {0, 0}, {2, 6}, 64, 48, 0x12345678u},
        {"shard-1.safetensors", "blocks.0.kernel", {2, 0}, {2, 6}, 64, 48, 0xFFFFFFFFu}}});
  m.variables.push_back({"blocks.0.bias",
                         "Param",
                         "BF16",
                         {6},
                         nullptr,
                         MeshRecord{},
                         Json::object(),
                         {{"shard-0.safetensors", "blocks.0.bias", {0}, {6}, 112, 12, 7}}});
  m.variables.push_back({"step",
                         "OptState",
                         "I64",
                         {},
                         Json::array(),
                         MeshRecord{},
                         Json::object(),
                         {{"shard-0.safetensors", "step", {}, {}, 128, 8, 0}}});
  m.per_rank = Json::array({{{"rng", 1}}, {{"rng", 2}}});
  m.user_metadata = {{"step", 10}, {"note", "unit test"}};
  return m;
}

// parse_manifest on the sample after `edit` changed its JSON.
Manifest parse_edited(const std::function<void(Json&)>& edit) {
  Json j = Json::parse(serialize_manifest(sample()));
  edit(j);
  return parse_manifest(j.dump(), kFile);
}

Json& kernel(Json& j) { return j["variables"][0]; }
Json& kernel_chunk(Json& j, int i) { return j["variables"][0]["chunks"][i]; }

}  // namespace

TEST_CASE("a manifest survives serialize then parse unchanged") {
  const Manifest m = sample();
  const std::string text = serialize_manifest(m);
  CHECK_THAT(text, StartsWith("{\n \"format\": \"nnx-checkpoint\",\n \"version\": 2,\n "
                              "\"world_size\": 2,\n \"files\": [\n  {\n   \"name\": "
                              "\"shard-0.safetensors\",\n   \"size\": 1000\n  },"));
  const Manifest back = parse_manifest(text, kFile);
  CHECK(back == m);
  CHECK(back.variables[0].chunks[1].crc32c == 0xFFFFFFFFu);
  CHECK(back.variables[0].spec == Json::array({"data", nullptr}));
  CHECK(back.variables[1].spec.is_null());
  CHECK(back.user_metadata["note"] == "unit test");
  CHECK(serialize_manifest(back) == text);
  CHECK(parse_manifest(serialize_manifest(Manifest{}), kFile) == Manifest{});
}

TEST_CASE("read_manifest reads a committed checkpoint and explains a missing one") {
  nnx_format_test::TempDir dir;
  CHECK_THROWS_WITH(read_manifest(dir.path()),
                    Equals("[read_manifest] '" + dir.path() +
                           "' holds no committed checkpoint: "
                           "it has no manifest.json (a save that did not finish, or the wrong "
                           "path)"));
  CHECK_THROWS_WITH(
      read_manifest(dir.file("step_9")),
      Equals("[read_manifest] checkpoint directory '" + dir.file("step_9") + "' does not exist"));
  write_file_atomically(dir.file("manifest.json"), serialize_manifest(sample()));
  CHECK(read_manifest(dir.path()) == sample());
  nnx_format_test::write_bytes(dir.file("manifest.json"),
                               "{\"format\": \"nnx-checkpoint\", \"vers");
  CHECK_THROWS_WITH(
      read_manifest(dir.path()),
      StartsWith("[parse_manifest] '" + dir.file("manifest.json") + "': not valid JSON"));
}

TEST_CASE("Manifest::at names the checkpoint directory and suggests close paths") {
  const Manifest m = sample();
  CHECK(&m.at("step", "ckpt") == &m.variables[2]);
  CHECK(m.find("blocks.0") == nullptr);
  CHECK_THROWS_WITH(m.at("blocks.0.kernal", "ckpt"),
                    Equals("[at] variable 'blocks.0.kernal' is missing from the checkpoint in "
                           "'ckpt' (3 variables); close paths: blocks.0.kernel"));
}

TEST_CASE("a manifest of another format or version is rejected") {
  CHECK_THROWS_WITH(parse_manifest("[]", kFile),
                    Equals("[parse_manifest] 'ckpt/manifest.json': a manifest must be a JSON "
                           "object, got an array of 0 entries"));
  CHECK_THROWS_WITH(parse_manifest("{\"format\": ", kFile),
                    StartsWith("[parse_manifest] 'ckpt/manifest.json': not valid JSON: "));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { j["format"] = "orbax"; }),
                    Equals("[parse_manifest] 'ckpt/manifest.json': format is 'orbax', expected "
                           "'nnx-checkpoint': this is not an nnx checkpoint manifest"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { j["version"] = 3; }),
                    Equals("[parse_manifest] 'ckpt/manifest.json': manifest version 3; this nnx "
                           "reads versions 1 to 2 (the checkpoint was written by a newer nnx)"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { j["version"] = 0; }),
                    Equals("[parse_manifest] 'ckpt/manifest.json': manifest version 0; this nnx "
                           "reads versions 1 to 2"));
  CHECK(parse_edited([](Json& j) { j["version"] = 1; }).version == 1);  // still read
  CHECK_THROWS_WITH(parse_edited([](Json& j) { j["version"] = "1"; }),
                    Contains("'ckpt/manifest.json': version must be an integer in"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { j.erase("format"); }),
                    Contains("'ckpt/manifest.json': missing required key 'format'"));
}

TEST_CASE("bad top-level manifest fields are rejected naming the file") {
  CHECK_THROWS_WITH(parse_edited([](Json& j) { j["world_size"] = 0; }),
                    Contains("'ckpt/manifest.json': world_size must be an integer in [1, "
                             "2147483647], got 0"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { j["shards"] = 1; }),
                    Contains("'ckpt/manifest.json': unknown key 'shards'"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { j.erase("variables"); }),
                    Contains("'ckpt/manifest.json': missing required key 'variables'"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { j["variables"] = Json::object(); }),
                    Contains("'ckpt/manifest.json': variables must be an array"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) {
                      j["per_rank"] = Json::array({1, 2, 3});
                    }),
                    Contains("'ckpt/manifest.json': per_rank must be null or an array of "
                             "world_size = 2 entries, got an array of 3 entries"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { j["user_metadata"] = "x"; }),
                    Contains("'ckpt/manifest.json': user_metadata must be an object"));
  CHECK_THROWS_WITH(parse_manifest(std::string(70, '[') + std::string(70, ']'), kFile),
                    Contains("'ckpt/manifest.json': JSON nests deeper than 64 levels"));
  CHECK(parse_edited([](Json& j) { j["per_rank"] = nullptr; }).per_rank.is_null());
}

TEST_CASE("manifest file entries must be plain, unique names") {
  CHECK_THROWS_WITH(parse_edited([](Json& j) { j["files"][0]["name"] = "../shard-0.safetensors"; }),
                    Contains("files[0] in 'ckpt/manifest.json': '../shard-0.safetensors' is not a "
                             "plain file name: checkpoint file names must stay inside"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { j["files"][1]["name"] = "/etc/passwd"; }),
                    Contains("files[1] in 'ckpt/manifest.json': '/etc/passwd' is not a plain"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { j["files"][1]["name"] = "shard-0.safetensors"; }),
                    Equals("[parse_manifest] files[1] in 'ckpt/manifest.json': file "
                           "'shard-0.safetensors' is listed twice"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { j["files"][0]["size"] = -1; }),
                    Contains("files[0] in 'ckpt/manifest.json': size must be a non-negative"));
}

TEST_CASE("manifest variables need a unique path, a kind, a known dtype and a valid shape") {
  CHECK_THROWS_WITH(parse_edited([](Json& j) { kernel(j)["path"] = ""; }),
                    Equals("[parse_manifest] variables[0] in 'ckpt/manifest.json': variable path "
                           "must not be empty"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { j["variables"][2]["path"] = "blocks.0.bias"; }),
                    Equals("[parse_manifest] 'ckpt/manifest.json': variable 'blocks.0.bias' is "
                           "listed twice"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { kernel(j).erase("kind"); }),
                    Equals("[parse_manifest] " + kKernel + ": missing required key 'kind'"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { kernel(j)["sharding"] = 1; }),
                    Contains("variables[0] in 'ckpt/manifest.json': unknown key 'sharding'"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { kernel(j)["dtype"] = "F8"; }),
                    Contains("unknown dtype 'F8' for " + kKernel));
  CHECK_THROWS_WITH(
      parse_edited([](Json& j) {
        kernel(j)["shape"] = {4, -6};
      }),
      Equals("[checked_numel] shape (4, -6) of " + kKernel + " has a negative dim -6"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) {
                      kernel(j)["shape"] = {4, "6"};
                    }),
                    Contains(kKernel + ": shape must hold integers below 2^63, got \"6\""));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { kernel(j)["metadata"] = Json::array({1}); }),
                    Contains(kKernel + ": metadata must be an object, got an array of 1 entries"));
}

TEST_CASE("a manifest spec must match the variable's rank and name each mesh axis once") {
  CHECK_THROWS_WITH(parse_edited([](Json& j) { kernel(j)["mesh"]["axis_sizes"] = {0}; }),
                    Equals("[parse_manifest] " + kKernel +
                           ": mesh axis 'data' has size 0; "
                           "sizes must be >= 1"));
  CHECK_THROWS_WITH(
      parse_edited([](Json& j) {
        kernel(j)["mesh"] = {{"axis_names", {"data", "data"}}, {"axis_sizes", {2, 2}}};
      }),
      Contains(kKernel + ": mesh axis 'data' is named twice"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) {
                      kernel(j)["mesh"]["axis_sizes"] = {2, 2};
                    }),
                    Contains(kKernel + ": mesh has 1 axis names but 2 axis sizes"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { kernel(j)["spec"] = {"data"}; }),
                    Equals("[parse_manifest] " + kKernel +
                           ": spec must be null or an array of 2 "
                           "entries (one per dim), got an array of 1 entries"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) {
                      kernel(j)["spec"] = {"model", nullptr};
                    }),
                    Equals("[parse_manifest] " + kKernel +
                           ": spec names mesh axis 'model' for "
                           "dim 0, but the mesh has axes (data)"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) {
                      kernel(j)["spec"] = {"data", "data"};
                    }),
                    Contains(kKernel + ": spec uses mesh axis 'data' twice"));
  CHECK_THROWS_WITH(
      parse_edited([](Json& j) {
        kernel(j)["spec"] = Json::array({Json::array({"data"}), Json::array({"data"})});
      }),
      Contains(kKernel + ": spec uses mesh axis 'data' twice"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) {
                      kernel(j)["spec"] = {3, nullptr};
                    }),
                    Contains(kKernel + ": spec entry for dim 0 must be null, an axis name or an "
                                       "array of axis names, got 3"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { kernel(j)["spec"] = "data"; }),
                    Contains(kKernel + ": spec must be null or an array of 2 entries"));
  CHECK(parse_edited([](Json& j) { kernel(j)["spec"] = nullptr; }).variables[0].spec.is_null());
  CHECK(parse_edited([](Json& j) {
          kernel(j)["spec"] = Json::array({Json::array({"data"}), Json::array()});
        })
            .variables[0]
            .spec[0] == Json::array({"data"}));
}

TEST_CASE("a manifest chunk must lie inside its variable and inside a listed file") {
  const std::string chunk1 = "variable 'blocks.0.kernel', chunk 1 in 'ckpt/manifest.json'";
  CHECK_THROWS_WITH(
      parse_edited([](Json& j) { kernel_chunk(j, 1)["file"] = "shard-9.safetensors"; }),
      Equals("[parse_manifest] " + chunk1 +
             ": file 'shard-9.safetensors' is not "
             "listed in the manifest's files"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { kernel_chunk(j, 1)["start"] = {2}; }),
                    Equals("[parse_manifest] " + chunk1 +
                           ": start (2,) and shape (2, 6) must "
                           "have the variable's rank 2"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) {
                      kernel_chunk(j, 1)["start"] = {-1, 0};
                    }),
                    Equals("[parse_manifest] " + chunk1 +
                           ": block at start (-1, 0) with shape "
                           "(2, 6) does not lie inside the variable's shape (4, 6) (dim 0)"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) {
                      kernel_chunk(j, 1)["start"] = {3, 0};
                    }),
                    Contains(chunk1 + ": block at start (3, 0) with shape (2, 6) does not lie "
                                      "inside the variable's shape (4, 6) (dim 0)"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) {
                      kernel_chunk(j, 1)["start"] = {INT64_MAX, 0};
                    }),
                    Contains(chunk1 + ": block at start (9223372036854775807, 0)"));
  CHECK_THROWS_WITH(
      parse_edited([](Json& j) {
        kernel_chunk(j, 1)["shape"] = {INT64_MAX, 6};
      }),
      Contains(chunk1 + ": block at start (2, 0) with shape (9223372036854775807, 6)"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { kernel_chunk(j, 1)["nbytes"] = 40; }),
                    Equals("[parse_manifest] " + chunk1 +
                           ": nbytes is 40 but shape (2, 6) of F32 "
                           "needs 48 bytes"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { kernel_chunk(j, 1)["offset"] = 990; }),
                    Equals("[parse_manifest] " + chunk1 +
                           ": bytes [990, 990 + 48) lie outside "
                           "file 'shard-1.safetensors' of 1000 bytes"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { kernel_chunk(j, 1)["offset"] = UINT64_MAX; }),
                    Contains(chunk1 + ": bytes [18446744073709551615, 18446744073709551615 + 48) "
                                      "lie outside file"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { j["files"][1]["size"] = 100; }),
                    Contains(chunk1 + ": bytes [64, 64 + 48) lie outside file "
                                      "'shard-1.safetensors' of 100 bytes"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { kernel_chunk(j, 1)["crc32c"] = 4294967296; }),
                    Contains(chunk1 + ": crc32c must be an integer in [0, 4294967295], got "
                                      "4294967296"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { kernel_chunk(j, 1)["offset"] = "64"; }),
                    Contains(chunk1 + ": offset must be a non-negative integer below 2^64, got "
                                      "\"64\""));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { kernel_chunk(j, 0)["crc"] = 1; }),
                    Contains("variable 'blocks.0.kernel', chunk 0 in 'ckpt/manifest.json': "
                             "unknown key 'crc'"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { kernel_chunk(j, 0).erase("key"); }),
                    Contains("chunk 0 in 'ckpt/manifest.json': missing required key 'key'"));
}

TEST_CASE("the chunks of a manifest variable must tile it exactly") {
  CHECK_THROWS_WITH(parse_edited([](Json& j) {
                      kernel_chunk(j, 1)["start"] = {1, 0};
                    }),
                    Equals("[parse_manifest] " + kKernel +
                           ": chunk 0 (start (0, 0), shape (2, 6)) "
                           "and chunk 1 (start (1, 0), shape (2, 6)) overlap"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { kernel(j)["chunks"].erase(1); }),
                    Equals("[parse_manifest] " + kKernel +
                           ": its chunks cover 12 of the 24 "
                           "elements of shape (4, 6); every element needs exactly one chunk"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) { j["variables"][1]["chunks"] = Json::array(); }),
                    Contains("variable 'blocks.0.bias' in 'ckpt/manifest.json': its chunks cover "
                             "0 of the 6 elements of shape (6,)"));
  CHECK_THROWS_WITH(parse_edited([](Json& j) {
                      kernel(j)["chunks"] = Json::array();
                      for (int i = 0; i <= 65536; ++i) kernel(j)["chunks"].push_back(nullptr);
                    }),
                    Contains(kKernel + ": chunks must be an array of at most 65536 chunks, got an "
                                       "array of 65537 entries"));
}

TEST_CASE("a manifest variable split into thousands of chunks is checked quickly") {
  Manifest m;
  m.files = {{"data.safetensors", 1u << 20}};
  VariableRecord v{"embed", "Param", "U8", {200, 100}, nullptr, {}, Json::object(), {}};
  for (int64_t i = 0; i < 100; ++i)
    for (int64_t j = 0; j < 50; ++j)
      v.chunks.push_back({"data.safetensors",
                          "c",
                          {2 * i, 2 * j},
                          {2, 2},
                          static_cast<uint64_t>(4 * (50 * i + j)),
                          4,
                          0});
  m.variables.push_back(v);
  CHECK(parse_manifest(serialize_manifest(m), kFile).variables[0].chunks.size() == 5000);
  m.variables[0].chunks.back().start = {196, 96};  // now overlaps chunk 4948 and leaves a gap
  CHECK_THROWS_WITH(parse_manifest(serialize_manifest(m), kFile),
                    Contains("variable 'embed' in 'ckpt/manifest.json': chunk 4948 (start (196, "
                             "96), shape (2, 2)) and chunk 4999 (start (196, 96), shape (2, 2)) "
                             "overlap"));
}

TEST_CASE("a manifest variable with too many irregular chunks is rejected, not searched forever") {
  Manifest m;
  m.files = {{"data.safetensors", 1u << 20}};
  VariableRecord v{"embed", "Param", "U8", {4000, 4000}, nullptr, {}, Json::object(), {}};
  for (int64_t i = 0; i < 1100; ++i)
    v.chunks.push_back({"data.safetensors", "c", {2 * i, 2 * i}, {1, 1}, 0, 1, 0});
  m.variables.push_back(v);
  CHECK_THROWS_WITH(parse_manifest(serialize_manifest(m), kFile),
                    Equals("[parse_manifest] variable 'embed' in 'ckpt/manifest.json': its 1100 "
                           "chunks are too many and too irregular to check for overlap (over 1024 "
                           "chunks whose boundaries cut more than 64 cells per chunk); use a "
                           "regular grid of chunks"));
}
