// Meshes over the MPI world: row-major coordinates and the groups of each axis communicator.
#include "../catch_after_torch.h"

#include <nnx/nnx.h>
#include <nnx/sharding/detail/live_communicators.h>

#include <torch/types.h>

using Catch::Matchers::Contains;

namespace {
std::vector<std::vector<int64_t>> meshes_for(int n) {
  if (n == 8) return {{8}, {2, 4}, {4, 2}, {2, 2, 2}};
  if (n == 4) return {{4}, {2, 2}, {1, 4}};
  if (n == 2) return {{2}, {1, 2}, {2, 1}};
  return {{1}, {1, 1}};
}
const std::vector<std::string> kNames{"a", "b", "c"};
}  // namespace

TEST_CASE("mesh coordinates are row-major and axis groups share the other coordinates",
          "[ranks2][ranks4][ranks8]") {
  const int n = nnx::world_size(), me = nnx::world_rank();
  for (const auto& shape : meshes_for(n)) {
    std::vector<std::string> names(kNames.begin(), kNames.begin() + shape.size());
    auto mesh = nnx::make_mesh(shape, names);
    CHECK(mesh->rank() == me);
    CHECK(mesh->rank_of(mesh->coordinates()) == me);
    for (size_t d = 0; d < shape.size(); ++d) {
      const auto& comm = mesh->comm(names[d]);
      CHECK(comm.size() == shape[d]);
      CHECK(comm.rank() == mesh->coordinates()[d]);
      // The members of this axis group are the ranks that differ from me only on axis d.
      auto members = comm.all_gather(torch::full({1}, static_cast<int64_t>(me)), 0);
      for (int64_t i = 0; i < shape[d]; ++i) {
        auto coords = mesh->coordinates();
        coords[d] = i;
        CHECK(members[i].item<int64_t>() == mesh->rank_of(coords));
      }
    }
    CHECK(mesh->comm(names).size() == n);
  }
}

TEST_CASE("a mesh that does not fit the world is an error on every rank",
          "[ranks2][ranks4][ranks8]") {
  const int n = nnx::world_size();
  CHECK_THROWS_WITH(nnx::make_mesh({n, 2}, {"data", "model"}),
                    Contains("processes") && Contains(fmt::format("mpirun -np {}", 2 * n)));
  auto mesh = nnx::make_mesh({n}, {"data"});
  CHECK_THROWS_WITH(mesh->comm("model"), Contains("unknown mesh axis 'model'"));
}

TEST_CASE("a mesh description has no processes") {
  nnx::Mesh mesh({2, 4}, {"data", "model"});
  CHECK_FALSE(mesh.is_bound());
  CHECK(mesh.coordinates_of(6) == std::vector<int64_t>{1, 2});
  CHECK(mesh.rank_of({1, 3}) == 7);
  CHECK_THROWS_WITH(mesh.comm("data"), Contains("description only"));
  auto world = nnx::make_mesh({nnx::world_size()}, {"x"});
  CHECK(world->is_bound());
}

TEST_CASE("a mesh frees its communicators when it goes", "[ranks2][ranks4]") {
  const int64_t before = nnx::detail::live_communicators();
  int64_t id = -1;
  for (int i = 0; i < 20; ++i) {
    auto mesh = nnx::make_mesh({nnx::world_size(), 1}, {"a", "b"});
    auto x = nnx::device_put(torch::ones({nnx::world_size() * 2, 3}), {mesh, nnx::P("a")});
    CHECK(torch::equal(nnx::gather(x).cpu(), torch::ones({nnx::world_size() * 2, 3})));
    CHECK(nnx::detail::live_communicators() > before);
    id = mesh->comm(std::string("a")).id();
  }
  CHECK(nnx::detail::live_communicators() == before);
  // An id outliving its communicator is an error that names it, not a dangling handle.
  CHECK_THROWS_WITH(nnx::Communicator::by_id(id),
                    Contains("no longer exists") && Contains("('a')") &&
                        Contains("its owner (a mesh"));
}
