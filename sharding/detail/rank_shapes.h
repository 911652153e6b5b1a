// Where the API takes each process's tensor and assumes the processes agree on its dtype and
// shape (device_put, make_array_from_process_local_data, shard_map outputs), a check that they
// do: otherwise each rank would build a different global array and, where no later collective
// notices, compute a different value.
#pragma once

#include <ATen/core/Tensor.h>

namespace nnx {
class Mesh;
}

namespace nnx::detail {

// How check_same_on_every_rank's error reads.
struct RankCheck {
  const char* op;    // the function the error names
  const char* what;  // the tensors, plural ("whole tensors")
  const char* fix;   // the message's end
};

// Every member of `mesh` throws, naming each rank's dtype and shape, where the members' `t`
// differ in either. One small all-gather over the mesh; nothing on a mesh of one process.
void check_same_on_every_rank(const Mesh& mesh, const at::Tensor& t, const RankCheck& check);

}  // namespace nnx::detail
