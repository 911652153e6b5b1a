// The device engine's choice (see engine_choice.h).
#include <nnx/core/error.h>
#include <nnx/sharding/detail/engine_choice.h>

#include <set>
#include <utility>

namespace nnx::detail {

EngineSetting parse_engine_setting(const char* value) {
  const std::string v = value == nullptr ? "" : value;
  if (v.empty()) return EngineSetting::automatic;
  if (v == "nccl") return EngineSetting::nccl;
  if (v == "mpi") return EngineSetting::mpi;
  NNX_FAIL("NNX_ENGINE='{}' names no engine; use nccl or mpi (or leave it unset)", v);
}

namespace {
const char* name_of(EngineSetting s) {
  switch (s) {
    case EngineSetting::nccl: return "nccl";
    case EngineSetting::mpi: return "mpi";
    default: return "unset";
  }
}
}  // namespace

Engine choose_engine(const std::vector<EngineSeat>& seats, bool nccl_built,
                     const std::string& comm_name) {
  if (seats.empty()) return Engine::mpi_staging;
  for (size_t r = 1; r < seats.size(); ++r)
    NNX_CHECK(seats[r].setting == seats[0].setting,
              "on '{}', member 0 has NNX_ENGINE={} but member {} has NNX_ENGINE={}; set it alike "
              "on every rank", comm_name, name_of(seats[0].setting), r, name_of(seats[r].setting));
  const EngineSetting setting = seats[0].setting;
  if (setting == EngineSetting::mpi) return Engine::mpi_staging;
  std::set<std::pair<uint64_t, uint64_t>> gpus;
  int shared = -1;
  for (size_t r = 0; r < seats.size() && shared < 0; ++r)
    if (!gpus.insert({seats[r].host, seats[r].gpu}).second) shared = static_cast<int>(r);
  if (setting == EngineSetting::nccl) {
    NNX_CHECK(nccl_built, "NNX_ENGINE=nccl, but this build of nnx has no NCCL; unset it or "
              "rebuild against a CUDA LibTorch");
    NNX_CHECK(shared < 0, "NNX_ENGINE=nccl, but member {} of '{}' shares its GPU with another "
              "member and NCCL refuses that; give each rank its own GPU or set NNX_ENGINE=mpi",
              shared, comm_name);
  }
  return nccl_built && shared < 0 ? Engine::nccl : Engine::mpi_staging;
}

}  // namespace nnx::detail
