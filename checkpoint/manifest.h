// The manifest of a sharded checkpoint: a versioned JSON file listing the shard files and, per
// variable, its dtype, global shape, sharding and the chunks that hold its values.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nnx::checkpoint {

// Version 2 checksums cover each chunk's position as well as its bytes; version 1 is still read.
constexpr int kManifestVersion = 2;
constexpr int kOldestManifestVersion = 1;
constexpr uint64_t kMaxManifestBytes = 1ull << 30;
constexpr size_t kMaxChunksPerVariable = size_t{1} << 16;

// A dense row-major block of the global array at `start`, stored in `file` at absolute byte
// `offset`; `key` is its tensor name inside that safetensors file.
struct ChunkRecord {
  std::string file;
  std::string key;
  std::vector<int64_t> start;
  std::vector<int64_t> shape;
  uint64_t offset = 0;
  uint64_t nbytes = 0;
  uint32_t crc32c = 0;
  bool operator==(const ChunkRecord&) const = default;
};

// A chunk's checksum as the manifest records it: the CRC-32C of its bytes (`bytes_crc`), from
// version 2 on extended over its start and shape (little-endian int64s), so that a chunk moved
// to another position in the manifest fails it.
uint32_t chunk_checksum(uint32_t bytes_crc, const std::vector<int64_t>& start,
                        const std::vector<int64_t>& shape, int version = kManifestVersion);

struct MeshRecord {
  std::vector<std::string> axis_names;
  std::vector<int64_t> axis_sizes;
  bool operator==(const MeshRecord&) const = default;
};

struct VariableRecord {
  std::string path;  // "blocks.0.attn.kernel"
  std::string kind;  // "Param", "BatchStat", ...
  std::string dtype;
  std::vector<int64_t> shape;
  nlohmann::json spec;  // null (replicated) or an array: per dim null | "axis" | ["a", "b"]
  MeshRecord mesh;
  nlohmann::json metadata = nlohmann::json::object();  // free-form
  std::vector<ChunkRecord> chunks;                     // tile the global array exactly
  bool operator==(const VariableRecord&) const = default;
};

struct FileRecord {
  std::string name;  // plain name inside the checkpoint directory
  uint64_t size = 0;
  bool operator==(const FileRecord&) const = default;
};

struct Manifest {
  int version = kManifestVersion;
  int world_size = 1;
  std::vector<FileRecord> files;
  std::vector<VariableRecord> variables;
  nlohmann::json per_rank;  // null, or an array of world_size values
  nlohmann::json user_metadata = nlohmann::json::object();

  const VariableRecord* find(std::string_view path) const;
  // Throws naming dir and listing close paths when the variable is not in the checkpoint.
  const VariableRecord& at(std::string_view path, std::string_view dir) const;
  bool operator==(const Manifest&) const = default;
};

struct SafetensorsHeader;

// Throws unless `header` (of the shard file `file`) holds `chunk` of `variable` where the
// manifest records it: key, dtype, shape, byte offset and size.
void check_chunk_in_header(const SafetensorsHeader& header, const ChunkRecord& chunk,
                           std::string_view dtype, std::string_view variable,
                           std::string_view file);

// {"format": "nnx-checkpoint", "version": 1, ...}, indented by 1.
std::string serialize_manifest(const Manifest& manifest);
// Parses and validates everything (see manifest.cpp); errors name `file` and the variable.
Manifest parse_manifest(std::string_view text, std::string_view file);
// Reads and parses dir + "/manifest.json".
Manifest read_manifest(const std::string& dir);

}  // namespace nnx::checkpoint
