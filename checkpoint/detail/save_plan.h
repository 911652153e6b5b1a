// The steps of a save, shared by checkpoint::save and the CheckpointManager's background saves:
// choose the blocks this rank writes (one replica per distinct block), write them, gather the
// chunk records and commit the manifest.
#pragma once

#include <nnx/checkpoint/checkpoint.h>
#include <nnx/checkpoint/manifest.h>
#include <nnx/sharding/communicator.h>

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace nnx::checkpoint::detail {

struct BlockToWrite {
  std::string path;
  at::Tensor data;  // contiguous CPU tensor of the block
  std::vector<int64_t> start;
};

struct SavePlan {
  std::vector<VariableRecord> variables;  // every variable, without chunks, in state order
  std::vector<BlockToWrite> blocks;       // the blocks this rank writes
};

// Checks `state` (concrete, no pending sums, a dtype safetensors knows) and picks this rank's
// blocks: on a mesh, the rank at coordinate 0 of every axis the spec does not use; off a mesh,
// rank 0. `copy`: the blocks are copied (for a background write); else they alias the state.
SavePlan plan_save(const State& state, int rank, bool copy);

// Collective over `comm`: plan_save on every rank; if it fails on any, every rank throws (the
// first failing rank's message, prefixed with its rank elsewhere), so no rank is left waiting.
SavePlan plan_save_everywhere(const Communicator& comm, const State& state, bool copy);

// Collective over `comm`: throws on every rank if `error` is non-empty on any (as above).
void raise_if_any_failed(const Communicator& comm, const std::string& error);

// Collective over `comm`: every rank checks its own `options` (metadata an object, both JSON the
// manifest can store as given); if any fails, every rank throws before anything is touched.
void check_save_options(const Communicator& comm, const SaveOptions& options);

// Collective over `comm`: rank 0 creates `dir` and checks it holds no checkpoint; every rank
// throws the same error if not.
void prepare_directory(const Communicator& comm, const std::string& dir, bool overwrite = false);

// Collective over `comm`: writes this rank's file, gathers every rank's records and, when all
// succeeded, rank 0 commits the manifest atomically. Errors (any rank's) are thrown on every
// rank, and then nothing is committed.
void write_and_commit(const Communicator& comm, const std::string& dir, const SavePlan& plan,
                      const SaveOptions& options);

// The safetensors name of a torch dtype, and back; errors name `what`.
std::string safetensors_dtype(at::ScalarType dtype, const std::string& what);
at::ScalarType torch_dtype(const std::string& name, const std::string& what);

}  // namespace nnx::checkpoint::detail
