// Looking into checkpoints without a model, and converting to and from plain safetensors: what
// the nnx-ckpt tool runs (ls, verify, export, import). Needs no mesh and no MPI.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace nnx::checkpoint {

// The tree: one line per variable (path, kind, dtype, global shape, spec and mesh, bytes,
// chunks), after a line on the checkpoint (version, world size, files, total bytes).
std::string describe(const std::string& dir);

struct VerifyReport {
  int64_t variables = 0, chunks = 0, bytes = 0;
  std::vector<std::string> problems;  // each names the file and variable
  bool ok() const { return problems.empty(); }
};
// Reads every file and chunk: sizes, safetensors headers against the manifest, checksums.
VerifyReport verify(const std::string& dir);

// Every variable whole, by path, in one plain safetensors file (what Python's safetensors and
// numpy read). Assembles one variable at a time; the file is written to a temporary name and
// renamed when complete.
void export_safetensors(const std::string& dir, const std::string& file);

// Prefix renames, first match wins: {"model.layers.", "layers."}. Names no rule matches stay.
using Renames = std::vector<std::pair<std::string, std::string>>;
// A plain safetensors file (PyTorch, Hugging Face...) as a checkpoint of whole arrays in `dir`,
// its tensors renamed by `renames`; restore() then reads it onto any mesh, any dtype.
void import_safetensors(const std::string& file, const std::string& dir,
                        const Renames& renames = {});

}  // namespace nnx::checkpoint
