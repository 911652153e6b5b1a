// The accelerators this build and this machine offer: CUDA devices and the NCCL library. Every
// build has these queries; without CUDA they report none.
#pragma once

#include <c10/core/Device.h>

#include <string>

namespace nnx {

// True when nnx was built with its CUDA/NCCL parts (NNX_WITH_CUDA).
bool built_with_cuda();
// CUDA devices visible to this process (0 without a GPU or without CUDA parts).
int cuda_device_count();
// The loaded NCCL library's version as "major.minor.patch"; empty without CUDA parts.
std::string nccl_version();

// This process's rank among the ranks on its machine, as the launcher announces it (Open MPI's
// OMPI_COMM_WORLD_LOCAL_RANK, MPICH's MPI_LOCALRANKID, Slurm's SLURM_LOCALID); 0 when none does.
int local_rank();
// The device this process's blocks live on (meshes made from now on take it):
// set_default_device's choice, else NNX_DEVICE ("cpu", "cuda" or "cuda:N"), else CUDA device
// local_rank() % cuda_device_count() when one is visible (one process per GPU), else the CPU.
c10::Device default_device();
void set_default_device(c10::Device device);

}  // namespace nnx
