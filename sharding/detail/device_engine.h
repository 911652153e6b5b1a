// The engine for CUDA tensors: NCCL where every member has a GPU of its own, else none, and the
// MPI engine stages CUDA tensors through host copies. NNX_ENGINE=mpi forces staging,
// NNX_ENGINE=nccl demands NCCL (an error where it cannot run).
#pragma once

#include <nnx/sharding/communicator.h>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <mpi.h>

#include <memory>
#include <string>

namespace nnx::detail {

// A device collective in flight. done() polls; wait() makes the caller's current stream wait
// for it (the host does not block).
class DeviceCompletion {
 public:
  virtual ~DeviceCompletion() = default;
  virtual bool done() = 0;
  virtual void wait() = 0;
};

// Collectives on contiguous device buffers, laid out by the caller as the MPI engine lays them
// out (stacked is [members, n...]). Blocking forms order the caller's current stream after the
// collective; async forms leave that to the completion.
class DeviceEngine {
 public:
  virtual ~DeviceEngine() = default;
  virtual void all_reduce(const at::Tensor& buffer, ReduceOp op) = 0;
  virtual void all_gather(const at::Tensor& local, const at::Tensor& stacked) = 0;
  virtual void reduce_scatter(const at::Tensor& stacked, const at::Tensor& out) = 0;
  virtual void all_to_all(const at::Tensor& send, const at::Tensor& received) = 0;
  virtual void broadcast(const at::Tensor& buffer, int root) = 0;
  // Sends `local` to member `dest` and receives `out` from member `source` (-1: none).
  virtual void permute(const at::Tensor& local, const at::Tensor& out, int source, int dest) = 0;
  virtual std::unique_ptr<DeviceCompletion> all_reduce_async(const at::Tensor& buffer,
                                                             ReduceOp op) = 0;
  virtual std::unique_ptr<DeviceCompletion> reduce_scatter_async(const at::Tensor& stacked,
                                                                 const at::Tensor& out) = 0;
};

// The engine for `device` tensors on the members of `comm`, or null where the MPI engine
// stages them. Collective over `comm`: every member calls it at its first CUDA collective there.
std::shared_ptr<DeviceEngine> make_device_engine(MPI_Comm comm, int rank, int size,
                                                 c10::Device device, const std::string& name);

}  // namespace nnx::detail
