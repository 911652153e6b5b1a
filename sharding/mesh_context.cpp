// The thread's mesh context.
#include <nnx/core/error.h>
#include <nnx/sharding/mesh_context.h>

namespace nnx {

namespace {
thread_local std::shared_ptr<const Mesh> active_mesh;
}

MeshContext::MeshContext(std::shared_ptr<const Mesh> mesh) : previous_(active_mesh) {
  NNX_CHECK(mesh != nullptr, "no mesh given; pass one from nnx::make_mesh");
  NNX_CHECK(mesh->is_bound(),
            "{} is a description only; a MeshContext needs processes: use nnx::make_mesh",
            mesh->to_string());
  active_mesh = std::move(mesh);
}

MeshContext::~MeshContext() { active_mesh = std::move(previous_); }

const std::shared_ptr<const Mesh>& current_mesh() { return active_mesh; }

}  // namespace nnx
