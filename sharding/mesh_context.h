// The mesh context (JAX's `with mesh:` / jax.sharding.use_mesh): while a MeshContext lives,
// variables created on this thread are placed on its mesh, each materializing its local block.
#pragma once

#include <nnx/sharding/mesh.h>

#include <memory>

namespace nnx {

// RAII: `nnx::MeshContext on(mesh);` then build the model. Contexts nest; the innermost wins.
class MeshContext {
 public:
  explicit MeshContext(std::shared_ptr<const Mesh> mesh);
  ~MeshContext();
  MeshContext(const MeshContext&) = delete;
  MeshContext& operator=(const MeshContext&) = delete;

 private:
  std::shared_ptr<const Mesh> previous_;
};

// The mesh of the innermost active MeshContext on this thread (null when none).
const std::shared_ptr<const Mesh>& current_mesh();

}  // namespace nnx
