// The NCCL engine: one NCCL communicator per MPI communicator that moves CUDA tensors,
// bootstrapped by broadcasting NCCL's unique id over the MPI communicator. Collectives run on a
// stream of the engine's own, ordered after the caller's current stream with an event, and the
// caller's stream waits for them in turn (async forms: at wait()).
#include <nnx/core/error.h>
#include <nnx/sharding/detail/device_engine.h>
#include <nnx/sharding/detail/engine_choice.h>
#include <nnx/sharding/detail/nccl/nccl_status.h>

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <string_view>
#include <vector>

namespace nnx::detail {

namespace {

ncclDataType_t nccl_type(at::ScalarType t, const char* op) {
  switch (t) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kLong: return ncclInt64;
    case at::kInt: return ncclInt32;
    case at::kChar: return ncclInt8;
    case at::kByte: return ncclUint8;
    default:
      throw_error(op, fmt::format("NCCL has no reduction for dtype {}", c10::toString(t)));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

size_t bytes_of(const at::Tensor& t) { return t.numel() * t.element_size(); }

char* bytes_at(const at::Tensor& t, size_t offset) {
  return static_cast<char*>(t.data_ptr()) + offset;
}

class EventCompletion final : public DeviceCompletion {
 public:
  EventCompletion(at::cuda::CUDAEvent event, c10::Device device, std::vector<at::Tensor> keep)
      : event_(std::move(event)), device_(device), keep_(std::move(keep)) {}
  bool done() override { return event_.query(); }
  void wait() override {
    c10::cuda::CUDAGuard guard(device_);
    event_.block(c10::cuda::getCurrentCUDAStream(device_.index()));
    keep_.clear();
  }

 private:
  at::cuda::CUDAEvent event_;
  c10::Device device_;
  std::vector<at::Tensor> keep_;  // the buffers NCCL reads and writes until then
};

class NcclEngine final : public DeviceEngine {
 public:
  NcclEngine(MPI_Comm comm, int rank, int size, c10::Device device, std::string name)
      : rank_(rank), device_(device), name_(std::move(name)),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device.index())) {
    ncclUniqueId id{};
    if (rank == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId", rank);
    NNX_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm) == MPI_SUCCESS,
              "broadcasting NCCL's id over '{}' failed", name_);
    c10::cuda::CUDAGuard guard(device_);
    nccl_check(ncclCommInitRank(&comm_, size, id, rank), "ncclCommInitRank", rank);
  }
  ~NcclEngine() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }

  void all_reduce(const at::Tensor& buffer, ReduceOp op) override {
    run("all_reduce", {buffer}, true, [&](cudaStream_t s) {
      return ncclAllReduce(buffer.data_ptr(), buffer.data_ptr(), buffer.numel(),
                           nccl_type(buffer.scalar_type(), "all_reduce"), nccl_op(op), comm_, s);
    });
  }
  void all_gather(const at::Tensor& local, const at::Tensor& stacked) override {
    run("all_gather", {local, stacked}, true, [&](cudaStream_t s) {
      return ncclAllGather(local.data_ptr(), stacked.data_ptr(), bytes_of(local), ncclUint8,
                           comm_, s);
    });
  }
  void reduce_scatter(const at::Tensor& stacked, const at::Tensor& out) override {
    run("reduce_scatter", {stacked, out}, true, [&](cudaStream_t s) {
      return ncclReduceScatter(stacked.data_ptr(), out.data_ptr(), out.numel(),
                               nccl_type(out.scalar_type(), "reduce_scatter"), ncclSum, comm_, s);
    });
  }
  void all_to_all(const at::Tensor& send, const at::Tensor& received) override {
    int members = 0;
    nccl_check(ncclCommCount(comm_, &members), "all_to_all", rank_);
    const size_t chunk = bytes_of(send) / members;
    run("all_to_all", {send, received}, true, [&](cudaStream_t s) {
      ncclResult_t result = ncclGroupStart();
      for (int peer = 0; peer < members && result == ncclSuccess; ++peer) {
        result = ncclSend(bytes_at(send, peer * chunk), chunk, ncclUint8, peer, comm_, s);
        if (result == ncclSuccess)
          result = ncclRecv(bytes_at(received, peer * chunk), chunk, ncclUint8, peer, comm_, s);
      }
      const ncclResult_t end = ncclGroupEnd();
      return result != ncclSuccess ? result : end;
    });
  }
  void broadcast(const at::Tensor& buffer, int root) override {
    run("broadcast", {buffer}, true, [&](cudaStream_t s) {
      return ncclBroadcast(buffer.data_ptr(), buffer.data_ptr(), bytes_of(buffer), ncclUint8,
                           root, comm_, s);
    });
  }
  void permute(const at::Tensor& local, const at::Tensor& out, int source, int dest) override {
    run("permute", {local, out}, true, [&](cudaStream_t s) {
      ncclResult_t result = ncclGroupStart();
      if (result == ncclSuccess && dest >= 0)
        result = ncclSend(local.data_ptr(), bytes_of(local), ncclUint8, dest, comm_, s);
      if (result == ncclSuccess && source >= 0)
        result = ncclRecv(out.data_ptr(), bytes_of(out), ncclUint8, source, comm_, s);
      const ncclResult_t end = ncclGroupEnd();
      return result != ncclSuccess ? result : end;
    });
  }
  std::unique_ptr<DeviceCompletion> all_reduce_async(const at::Tensor& buffer,
                                                     ReduceOp op) override {
    return run("all_reduce_async_", {buffer}, false, [&](cudaStream_t s) {
      return ncclAllReduce(buffer.data_ptr(), buffer.data_ptr(), buffer.numel(),
                           nccl_type(buffer.scalar_type(), "all_reduce_async_"), nccl_op(op),
                           comm_, s);
    });
  }
  std::unique_ptr<DeviceCompletion> reduce_scatter_async(const at::Tensor& stacked,
                                                         const at::Tensor& out) override {
    return run("reduce_scatter_async", {stacked, out}, false, [&](cudaStream_t s) {
      return ncclReduceScatter(stacked.data_ptr(), out.data_ptr(), out.numel(),
                               nccl_type(out.scalar_type(), "reduce_scatter_async"), ncclSum,
                               comm_, s);
    });
  }

 private:
  // Enqueues `call` on the engine's stream after the caller's pending work; `block_caller`:
  // the caller's stream waits for it at once, else at the completion's wait().
  std::unique_ptr<DeviceCompletion> run(const char* op, std::initializer_list<at::Tensor> tensors,
                                        bool block_caller,
                                        const std::function<ncclResult_t(cudaStream_t)>& call) {
    for (const auto& t : tensors)
      NNX_CHECK(t.is_cuda() && t.device() == device_ && t.is_contiguous(),
                "{} on '{}' takes contiguous tensors on {}, got one on {}", op, name_,
                device_.str(), t.device().str());
    c10::cuda::CUDAGuard guard(device_);
    const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(device_.index());
    at::cuda::CUDAEvent ready;
    ready.record(caller);
    ready.block(stream_);
    // The caching allocator must not hand these blocks out again before NCCL is done.
    for (const auto& t : tensors)
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
    nccl_check(call(stream_.stream()), op, rank_);
    at::cuda::CUDAEvent finished;
    finished.record(stream_);
    if (block_caller) {
      finished.block(caller);
      return nullptr;
    }
    return std::make_unique<EventCompletion>(std::move(finished), device_,
                                             std::vector<at::Tensor>(tensors));
  }

  int rank_;
  c10::Device device_;
  std::string name_;
  c10::cuda::CUDAStream stream_;
  ncclComm_t comm_ = nullptr;
};

uint64_t hash_text(std::string_view text) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : text) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

EngineSeat my_seat(c10::Device device) {
  std::array<char, 256> host{};
  gethostname(host.data(), host.size() - 1);
  std::array<char, 64> bus{};
  c10::cuda::CUDAGuard guard(device);
  if (cudaDeviceGetPCIBusId(bus.data(), static_cast<int>(bus.size()), device.index()) !=
      cudaSuccess)
    std::snprintf(bus.data(), bus.size(), "device %d", static_cast<int>(device.index()));
  return {hash_text(host.data()), hash_text(bus.data()),
          parse_engine_setting(std::getenv("NNX_ENGINE"))};
}

}  // namespace

std::shared_ptr<DeviceEngine> make_device_engine(MPI_Comm comm, int rank, int size,
                                                 c10::Device device, const std::string& name) {
  NNX_CHECK(device.is_cuda() && device.has_index(), "needs an indexed CUDA device, got {}",
            device.str());
  const EngineSeat mine = my_seat(device);
  std::vector<EngineSeat> seats(size);
  NNX_CHECK(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, seats.data(), sizeof mine, MPI_BYTE,
                          comm) == MPI_SUCCESS,
            "gathering the members' GPUs over '{}' failed", name);
  if (choose_engine(seats, /*nccl_built=*/true, name) != Engine::nccl) return nullptr;
  return std::make_shared<NcclEngine>(comm, rank, size, device, name);
}

}  // namespace nnx::detail
