// Which engine serves CUDA tensors on a communicator, decided from every member's seat (host,
// GPU, NNX_ENGINE setting) alone, so tests can try it on any machine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nnx::detail {

enum class EngineSetting : int32_t { automatic = 0, nccl = 1, mpi = 2 };
enum class Engine { nccl, mpi_staging };

// NNX_ENGINE's value (null or empty: automatic); anything but nccl or mpi is an error.
EngineSetting parse_engine_setting(const char* value);

struct EngineSeat {
  uint64_t host = 0;  // a hash of the host name
  uint64_t gpu = 0;   // a hash of the GPU's PCI bus id
  EngineSetting setting = EngineSetting::automatic;
};

// NCCL unless a member asks for mpi, NCCL is not built in, or two members share a GPU (NCCL
// refuses those: "Duplicate GPU detected"). Members set differently, or nccl demanded where
// it cannot run, are errors naming the communicator and the fix.
Engine choose_engine(const std::vector<EngineSeat>& seats, bool nccl_built,
                     const std::string& comm_name);

}  // namespace nnx::detail
