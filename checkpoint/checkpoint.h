// Sharded checkpoints (design.md §8): save a State from any mesh, restore it onto any other.
//   nnx::checkpoint::save("ckpt/100", nnx::state(model));
//   auto abstract = nnx::state(nnx::eval_shape([&] { return Model(rngs); }));
//   nnx::update(model, nnx::checkpoint::restore("ckpt/100", abstract, {.mesh = mesh}));
// A checkpoint is a directory: one safetensors file per writing rank (each distinct block once)
// and manifest.json, written last and atomically; a directory without it holds no checkpoint.
#pragma once

#include <nnx/framework/state.h>
#include <nnx/sharding/mesh.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace nnx::checkpoint {

struct SaveOptions {
  // Free-form JSON stored in the manifest (read back with read_metadata).
  nlohmann::json metadata = nlohmann::json::object();
  // This rank's own state that cannot be resharded (a data loader's position, say): saved per
  // rank with the world size; restore_per_rank refuses another world size.
  nlohmann::json per_rank = nullptr;
  // Replace a checkpoint already in the directory (its manifest goes first, so a save cut short
  // leaves no checkpoint there rather than a mixed one). Off: an existing checkpoint is an error.
  bool overwrite = false;
};

struct RestoreOptions {
  // Layout of target variables that carry no sharding: their metadata's spec on this mesh
  // (logical names through their rules). Null: whole arrays on every rank.
  std::shared_ptr<const Mesh> mesh;
  // Check every chunk read against its checksum, reading the whole of a chunk of which only
  // part is needed (streamed through a small buffer). false: read only the needed byte runs of
  // such chunks, unchecked (less I/O when resharding; a damaged byte there goes unnoticed).
  bool verify_all_checksums = true;
};

// Writes `state` (concrete variables) to `dir`, which must not hold a checkpoint yet (unless
// options.overwrite). Collective:
// every rank calls it with the same paths. Returns once the manifest is committed everywhere.
void save(const std::string& dir, const State& state, const SaveOptions& options = {});

// The variables of `target` (abstract or concrete: shapes, dtypes, shardings) read from `dir`:
// each rank reads only the bytes of its own blocks. A dtype that differs from the saved one is
// converted (float32 <-> bfloat16...). Collective over the world: every rank calls it, and a
// failure on any rank fails it on every rank (no rank goes on with a partial restore).
State restore(const std::string& dir, const State& target, const RestoreOptions& options = {});

// This rank's SaveOptions::per_rank; an error when the world size differs from the saver's.
nlohmann::json restore_per_rank(const std::string& dir);
// SaveOptions::metadata of the checkpoint in `dir`.
nlohmann::json read_metadata(const std::string& dir);

// Several states saved as one, each under its prefix: combine({{"model", m}, {"opt", o}}).
State combine(const std::vector<std::pair<std::string, State>>& parts);
// The variables of `state` under `prefix.`, with the prefix removed.
State part(const State& state, const std::string& prefix);

// Bytes this thread read from and wrote to shard files (tests and benchmarks reset and read).
struct IoCounts {
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  int64_t chunks_verified = 0;  // chunks read whole with their checksum checked
};
IoCounts& io_counts();

}  // namespace nnx::checkpoint
