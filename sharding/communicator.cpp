// Communicator's collectives: each agrees first (detail/agreement.h), then moves its data on the
// board, by direct reads, through MPI, or through the device engine.
#include <nnx/core/error.h>
#include <nnx/core/shape.h>
#include <nnx/sharding/comm_buffer.h>
#include <nnx/sharding/communicator.h>
#include <nnx/sharding/detail/agreement.h>
#include <nnx/sharding/detail/board_collectives.h>
#include <nnx/sharding/detail/collective_wait.h>
#include <nnx/sharding/detail/collective_watchdog.h>
#include <nnx/sharding/detail/comm_impl.h>
#include <nnx/sharding/detail/direct_collectives.h>
#include <nnx/sharding/detail/staged_all_reduce.h>
#include <nnx/sharding/detail/device_engine.h>
#include <nnx/sharding/detail/fingerprint_board.h>
#include <nnx/sharding/detail/live_communicators.h>
#include <nnx/sharding/detail/mpi_reduce_op.h>
#include <nnx/sharding/detail/mpi_run.h>
#include <nnx/sharding/world.h>

#include <ATen/MemoryOverlap.h>
#include <mpi.h>
#include <torch/types.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <vector>

namespace nnx {

namespace detail {

std::atomic<int64_t> owned_alive{0};

}  // namespace detail

namespace {

std::atomic<int> checking_mode{-1};  // -1: read the environment on first use

void check_device(const at::Tensor& t, const char* who) {
  if (!t.device().is_cpu() && !t.is_cuda())
    detail::throw_error(who, fmt::format("tensor on {}: collectives take CPU or CUDA tensors; "
                                         "move it with .to(torch::kCPU) first",
                                         t.device().str()));
}

// The device engine (NCCL) for a CUDA tensor on a group of several, chosen on first use; null
// for CPU tensors and where the MPI engine stages CUDA tensors instead.
detail::DeviceEngine* device_engine(detail::CommImpl& c, const at::Tensor& t, const char* who) {
  check_device(t, who);
  if (!t.is_cuda() || c.size == 1) return nullptr;
  if (!c.device_engine_chosen) {
    c.device_engine = detail::make_device_engine(c.comm, c.rank, c.size, t.device(), c.name);
    c.device_engine_chosen = true;
  }
  return c.device_engine.get();
}

// The MPI engine reads and writes host memory: a CUDA tensor goes through a host copy (the
// engine for CUDA tensors where NCCL cannot run, such as several ranks on one GPU). A group of
// one moves nothing, so nothing is staged.
bool staged(const detail::CommImpl& c, const at::Tensor& t, const char* who) {
  check_device(t, who);
  return !t.device().is_cpu() && c.size > 1;
}

int mpi_count(int64_t n, const char* who) {
  if (n > INT_MAX)
    detail::throw_error(who, fmt::format("{} elements exceed one MPI call's int count; split the "
                                         "tensor", n));
  return static_cast<int>(n);
}

// MPI type for reductions; half types are reduced in float32.
MPI_Datatype mpi_type(at::ScalarType t, const char* who) {
  switch (t) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kLong: return MPI_INT64_T;
    case at::kInt: return MPI_INT32_T;
    case at::kShort: return MPI_INT16_T;
    case at::kChar: return MPI_INT8_T;
    case at::kByte: return MPI_UINT8_T;
    default:
      detail::throw_error(who, fmt::format("no reduction for dtype {}", c10::toString(t)));
  }
}

}  // namespace

namespace {
// Communicators by id. Entries do not keep a communicator alive: a mesh's groups are freed with
// the mesh, and an id outliving its communicator is an error that says so.
struct RegistryEntry {
  std::weak_ptr<detail::CommImpl> impl;
  std::string name;
};
std::mutex registry_mutex;
std::vector<RegistryEntry>& communicator_registry() {
  static std::vector<RegistryEntry> all;
  return all;
}
}  // namespace

namespace detail {
int64_t live_communicators() { return owned_alive.load(); }
}  // namespace detail

Communicator::Communicator(std::shared_ptr<detail::CommImpl> impl, std::string name)
    : impl_(std::move(impl)), name_(std::move(name)) {
  impl_->name = name_;
  std::lock_guard<std::mutex> lock(registry_mutex);
  id_ = static_cast<int64_t>(communicator_registry().size());
  communicator_registry().push_back({impl_, name_});
}

Communicator Communicator::by_id(int64_t id) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  NNX_CHECK(id >= 0 && id < static_cast<int64_t>(communicator_registry().size()), "no communicator #{}", id);
  const RegistryEntry& entry = communicator_registry()[id];
  auto impl = entry.impl.lock();
  NNX_CHECK(impl, "communicator #{} ('{}') no longer exists: its owner (a mesh, or what duplicated "
            "or split it) was destroyed while something still needed it, such as a backward pass "
            "through Arrays on that mesh; keep the owner alive until that is done", id, entry.name);
  return Communicator(std::move(impl), entry.name, id);
}

Communicator::Communicator(std::shared_ptr<detail::CommImpl> impl, std::string name, int64_t id)
    : impl_(std::move(impl)), name_(std::move(name)), id_(id) {}

Communicator Communicator::world() {
  static Communicator world = [] {
    detail::ensure_mpi();
    auto impl = std::make_shared<detail::CommImpl>();
    impl->comm = MPI_COMM_WORLD;
    MPI_Comm_rank(impl->comm, &impl->rank);
    MPI_Comm_size(impl->comm, &impl->size);
    for (int r = 0; r < impl->size; ++r) impl->members.push_back(r);
    return Communicator(impl, "world");
  }();
  return world;
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->size; }

void Communicator::set_checking(bool on) { checking_mode = on ? 1 : 0; }

bool Communicator::checking() {
  int mode = checking_mode.load();
  if (mode < 0) {
    const char* env = std::getenv("NNX_CHECK_COLLECTIVES");
    mode = env != nullptr && std::string(env) != "0" ? 1 : 0;
    checking_mode = mode;
  }
  return mode == 1;
}

void Communicator::all_reduce_(at::Tensor& tensor, ReduceOp op) const {
  detail::DeviceEngine* engine = device_engine(*impl_, tensor, "all_reduce");
  if (!engine && staged(*impl_, tensor, "all_reduce")) {
    at::Tensor host = tensor.cpu();
    all_reduce_(host, op);
    tensor.copy_(host);
    return;
  }
  if (impl_->size == 1) {
    detail::agree(*impl_, "all_reduce", tensor, static_cast<int64_t>(op));
    return;
  }
  at::Tensor buffer = detail::reduced_in_float(tensor.scalar_type())
                          ? tensor.to(at::kFloat).contiguous()
                          : tensor.contiguous();
  detail::BoardInput input =
      detail::board_input(engine, buffer, false, true, detail::kAllReduceMeetings);
  input.stageable = true;
  const auto on_board =
      detail::agree(*impl_, "all_reduce", tensor, static_cast<int64_t>(op), input);
  if (on_board && on_board->through_staging) {
    detail::staged_all_reduce(*impl_->board, on_board->sequence, impl_->size, impl_->rank,
                              buffer.data_ptr(), buffer.numel(), buffer.scalar_type(), op,
                              impl_->comm, impl_->name);
  } else if (on_board && on_board->direct) {
    detail::direct_all_reduce(detail::direct_call(*impl_, on_board->sequence, "all_reduce"),
                              buffer.data_ptr(), buffer.numel(), buffer.scalar_type(), op);
  } else if (on_board) {
    detail::board_all_reduce(*impl_->board, on_board->sequence, impl_->size, buffer.data_ptr(),
                             buffer.numel(), buffer.scalar_type(), op);
  } else if (engine) {
    engine->all_reduce(buffer, op);
  } else detail::run_mpi(*impl_, name_, "all_reduce", [&](MPI_Request* r) {
    const int count = mpi_count(buffer.numel(), "all_reduce");
    const MPI_Datatype type = mpi_type(buffer.scalar_type(), "all_reduce");
    const MPI_Op reduce = detail::mpi_reduce_op(op, buffer.scalar_type());
    return r ? MPI_Iallreduce(MPI_IN_PLACE, buffer.data_ptr(), count, type, reduce, impl_->comm, r)
             : MPI_Allreduce(MPI_IN_PLACE, buffer.data_ptr(), count, type, reduce, impl_->comm);
  });
  if (!buffer.is_same(tensor)) tensor.copy_(buffer);
}

namespace {

// The engine's part of the all_gather, reduce_scatter and all_to_all forms, after agree(): dim
// 0 of contiguous buffers, which lie in member order already.

// `on_board`: agree() put every member's input, or its address, on the board at that sequence.
void gather_rows(const detail::CommImpl& c, detail::DeviceEngine* engine, const at::Tensor& out,
                 const at::Tensor& local, std::optional<detail::OnBoard> on_board) {
  const size_t bytes = detail::input_bytes(local);
  if (on_board && on_board->direct)
    return detail::direct_move(detail::direct_call(c, on_board->sequence, "all_gather"),
                               detail::moved_parts(*on_board));
  if (on_board)
    return detail::board_all_gather(*c.board, on_board->sequence, c.size, out.data_ptr(), bytes);
  if (engine) return engine->all_gather(local, out);
  detail::run_mpi(c, c.name, "all_gather", [&](MPI_Request* r) {
    const int count = mpi_count(local.numel() * local.element_size(), "all_gather");
    return r ? MPI_Iallgather(local.data_ptr(), count, MPI_BYTE, out.data_ptr(), count, MPI_BYTE,
                              c.comm, r)
             : MPI_Allgather(local.data_ptr(), count, MPI_BYTE, out.data_ptr(), count, MPI_BYTE,
                             c.comm);
  });
}

void scatter_rows(const detail::CommImpl& c, detail::DeviceEngine* engine, const at::Tensor& out,
                  const at::Tensor& stacked, std::optional<detail::OnBoard> on_board) {
  if (on_board && on_board->direct)
    return detail::direct_reduce_scatter(
        detail::direct_call(c, on_board->sequence, "reduce_scatter"), stacked.data_ptr(),
        out.data_ptr(), out.numel(), out.scalar_type());
  if (on_board)
    return detail::board_reduce_scatter(*c.board, on_board->sequence, c.size, c.rank,
                                        out.data_ptr(), out.numel(), out.scalar_type());
  if (engine) return engine->reduce_scatter(stacked, out);
  detail::run_mpi(c, c.name, "reduce_scatter", [&](MPI_Request* r) {
    const int count = mpi_count(out.numel(), "reduce_scatter");
    const MPI_Datatype type = mpi_type(out.scalar_type(), "reduce_scatter");
    return r ? MPI_Ireduce_scatter_block(stacked.data_ptr(), out.data_ptr(), count, type, MPI_SUM,
                                         c.comm, r)
             : MPI_Reduce_scatter_block(stacked.data_ptr(), out.data_ptr(), count, type, MPI_SUM,
                                        c.comm);
  });
}

void exchange_rows(const detail::CommImpl& c, detail::DeviceEngine* engine, const at::Tensor& out,
                   const at::Tensor& send, std::optional<detail::OnBoard> on_board) {
  const size_t chunk_bytes = detail::input_bytes(send) / c.size;
  if (on_board && on_board->direct)
    return detail::direct_move(detail::direct_call(c, on_board->sequence, "all_to_all"),
                               detail::moved_parts(*on_board));
  if (on_board)
    return detail::board_all_to_all(*c.board, on_board->sequence, c.size, c.rank, out.data_ptr(),
                                    chunk_bytes);
  if (engine) return engine->all_to_all(send, out);
  detail::run_mpi(c, c.name, "all_to_all", [&](MPI_Request* r) {
    const int count = mpi_count(send.numel() / c.size * send.element_size(), "all_to_all");
    return r ? MPI_Ialltoall(send.data_ptr(), count, MPI_BYTE, out.data_ptr(), count, MPI_BYTE,
                             c.comm, r)
             : MPI_Alltoall(send.data_ptr(), count, MPI_BYTE, out.data_ptr(), count, MPI_BYTE,
                            c.comm);
  });
}

// A buffer for a collective's output: from the reuse cache on CPU, fresh on a device.
at::Tensor output_buffer(detail::DeviceEngine* engine, at::IntArrayRef sizes,
                         const at::TensorOptions& options) {
  return engine ? at::empty(sizes, options) : comm_buffer(sizes, options);
}

// An `_into` call's output: contiguous, on the input's device, of its dtype, with `numel`
// elements (any shape: [size * n, ...] and [size, n, ...] both serve).
void check_output(const at::Tensor& out, const at::Tensor& in, int64_t numel, const char* who) {
  if (out.is_contiguous() && out.scalar_type() == in.scalar_type() &&
      out.device() == in.device() && out.numel() == numel)
    return;
  detail::throw_error(who, fmt::format("the output must be a contiguous {} tensor on {} with {} "
                                       "elements; got {} ({}) on {}{}",
                                       c10::toString(in.scalar_type()), in.device().str(), numel,
                                       c10::toString(out.scalar_type()),
                                       fmt::join(out.sizes(), ", "), out.device().str(),
                                       out.is_contiguous() ? "" : ", not contiguous"));
}

// The input of an `_into` call as the engines may read it: contiguous, and a copy where it
// shares memory with `out` (MPI and NCCL need distinct buffers).
at::Tensor into_input(const at::Tensor& out, const at::Tensor& in) {
  if (at::get_overlap_status(out, in) != at::MemOverlapStatus::No)
    return in.clone(at::MemoryFormat::Contiguous);  // in logical order, whatever its strides
  return in.contiguous();
}

// The input as the returning forms take it along dim 0: itself where its rows split evenly,
// else flat (an `_into` call takes tensors flat).
at::Tensor as_rows(const at::Tensor& in, int members) {
  return in.dim() > 0 && in.size(0) % members == 0 ? in : in.reshape({-1});
}

// Writes `result` (the collective's values, or the input in a group of one) into `out`.
void copy_into(const at::Tensor& out, const at::Tensor& result) {
  at::Tensor(out).copy_(result.reshape(out.sizes()));
}

// An `_into` call after its checks: a group of one copies; else the input goes to `rows`
// (gather_rows, scatter_rows or exchange_rows), on the board where it fits. Calls that only move
// data pass `parts_of` (gathered_parts, exchanged_parts).
template <class Rows>
void run_into(detail::CommImpl& c, detail::DeviceEngine* engine, const char* op,
              const at::Tensor& out, const at::Tensor& tensor, Rows rows,
              detail::PartsOf parts_of = nullptr) {
  if (c.size == 1) {
    detail::agree(c, op, tensor, 0);
    return copy_into(out, tensor);
  }
  at::Tensor input = into_input(out, tensor);
  std::optional<detail::MovedParts> parts;
  if (parts_of != nullptr) parts = detail::parts_for(engine, parts_of, c, out, input);
  const detail::BoardInput board =
      parts_of ? detail::moving_input(engine, input, parts, parts_of == detail::gathered_parts)
               : detail::board_input(engine, input, false);
  const auto on_board = detail::agree(c, op, tensor, 0, board);
  rows(c, engine, out, input, on_board);
}

}  // namespace

at::Tensor Communicator::all_gather(const at::Tensor& tensor, int64_t dim) const {
  detail::DeviceEngine* engine = device_engine(*impl_, tensor, "all_gather");
  if (!engine && staged(*impl_, tensor, "all_gather"))
    return all_gather(tensor.cpu(), dim).to(tensor.device());
  dim = normalize_dim(dim, std::max<int64_t>(tensor.dim(), 1), "all_gather");
  if (impl_->size == 1) {
    detail::agree(*impl_, "all_gather", tensor, dim);
    return tensor;
  }
  at::Tensor local = tensor.contiguous();
  // Along dim 0 the gathered rows are the output itself; along another dim they are stacked
  // first, then concatenated.
  auto sizes = tensor.sizes().vec();
  if (tensor.dim() == 0 || dim != 0)
    sizes.insert(sizes.begin(), impl_->size);
  else
    sizes[0] *= impl_->size;
  at::Tensor out = output_buffer(engine, sizes, tensor.options());
  auto parts = detail::parts_for(engine, detail::gathered_parts, *impl_, out, local);
  const auto on_board = detail::agree(*impl_, "all_gather", tensor, dim,
                                      detail::moving_input(engine, local, parts, true));
  gather_rows(*impl_, engine, out, local, on_board);
  if (tensor.dim() == 0 || dim == 0) return out;
  return torch::cat(out.unbind(0), dim);
}

void Communicator::all_gather_into(const at::Tensor& out, const at::Tensor& tensor) const {
  detail::DeviceEngine* engine = device_engine(*impl_, tensor, "all_gather_into");
  check_output(out, tensor, tensor.numel() * impl_->size, "all_gather_into");
  if (!engine && staged(*impl_, tensor, "all_gather_into"))
    return copy_into(out, all_gather(tensor.cpu(), 0));
  run_into(*impl_, engine, "all_gather", out, tensor, gather_rows, detail::gathered_parts);
}

at::Tensor Communicator::reduce_scatter(const at::Tensor& tensor, int64_t dim) const {
  detail::DeviceEngine* engine = device_engine(*impl_, tensor, "reduce_scatter");
  if (!engine && staged(*impl_, tensor, "reduce_scatter"))
    return reduce_scatter(tensor.cpu(), dim).to(tensor.device());
  dim = normalize_dim(dim, tensor.dim(), "reduce_scatter");
  NNX_CHECK(tensor.size(dim) % impl_->size == 0,
            "dim {} of size {} does not split evenly over {} members", dim, tensor.size(dim),
            impl_->size);
  if (impl_->size == 1) {
    detail::agree(*impl_, "reduce_scatter", tensor, dim);
    return tensor;
  }
  at::Tensor input =
      detail::reduced_in_float(tensor.scalar_type()) ? tensor.to(at::kFloat) : tensor;
  // Chunks along dim 0 of a contiguous tensor already lie in member order (no copy).
  const bool in_order = dim == 0 && input.is_contiguous();
  at::Tensor stacked =
      in_order ? input : torch::stack(input.chunk(impl_->size, dim), 0).contiguous();
  auto sizes = input.sizes().vec();
  if (in_order) {
    sizes[0] /= impl_->size;
  } else {
    sizes = stacked.sizes().vec();
    sizes.erase(sizes.begin());
  }
  const auto on_board = detail::agree(*impl_, "reduce_scatter", tensor, dim,
                                      detail::board_input(engine, stacked, false));
  at::Tensor out = output_buffer(engine, sizes, input.options());
  scatter_rows(*impl_, engine, out, stacked, on_board);
  return out.scalar_type() == tensor.scalar_type() ? out : out.to(tensor.scalar_type());
}

void Communicator::reduce_scatter_into(const at::Tensor& out, const at::Tensor& tensor) const {
  detail::DeviceEngine* engine = device_engine(*impl_, tensor, "reduce_scatter_into");
  NNX_CHECK(tensor.numel() % impl_->size == 0,
            "reduce_scatter_into: {} elements do not split evenly over {} members",
            tensor.numel(), impl_->size);
  check_output(out, tensor, tensor.numel() / impl_->size, "reduce_scatter_into");
  if ((!engine && staged(*impl_, tensor, "reduce_scatter_into")) ||
      detail::reduced_in_float(tensor.scalar_type()))
    return copy_into(out, reduce_scatter(as_rows(tensor, impl_->size), 0));
  run_into(*impl_, engine, "reduce_scatter", out, tensor, scatter_rows);
}

at::Tensor Communicator::all_to_all(const at::Tensor& tensor, int64_t split_dim,
                                    int64_t concat_dim) const {
  detail::DeviceEngine* engine = device_engine(*impl_, tensor, "all_to_all");
  if (!engine && staged(*impl_, tensor, "all_to_all"))
    return all_to_all(tensor.cpu(), split_dim, concat_dim).to(tensor.device());
  split_dim = normalize_dim(split_dim, tensor.dim(), "all_to_all");
  concat_dim = normalize_dim(concat_dim, tensor.dim(), "all_to_all");
  NNX_CHECK(tensor.size(split_dim) % impl_->size == 0,
            "dim {} of size {} does not split evenly over {} members", split_dim,
            tensor.size(split_dim), impl_->size);
  if (impl_->size == 1) {
    detail::agree(*impl_, "all_to_all", tensor, split_dim * 64 + concat_dim);
    return tensor;
  }
  // Chunks along dim 0 of a contiguous tensor are already in member order (no copy), and
  // received chunks concatenated along dim 0 are the output itself.
  at::Tensor send = split_dim == 0 && tensor.is_contiguous()
                        ? tensor
                        : torch::stack(tensor.chunk(impl_->size, split_dim), 0).contiguous();
  auto chunk = tensor.sizes().vec();
  chunk[split_dim] /= impl_->size;
  auto sizes = chunk;
  if (concat_dim == 0)
    sizes[0] *= impl_->size;
  else
    sizes.insert(sizes.begin(), impl_->size);
  at::Tensor received = output_buffer(engine, sizes, send.options());
  auto parts = detail::parts_for(engine, detail::exchanged_parts, *impl_, received, send);
  const auto on_board = detail::agree(*impl_, "all_to_all", tensor, split_dim * 64 + concat_dim,
                                      detail::moving_input(engine, send, parts, false));
  exchange_rows(*impl_, engine, received, send, on_board);
  if (concat_dim == 0) return received;
  return torch::cat(received.unbind(0), concat_dim);
}

void Communicator::all_to_all_into(const at::Tensor& out, const at::Tensor& tensor) const {
  detail::DeviceEngine* engine = device_engine(*impl_, tensor, "all_to_all_into");
  NNX_CHECK(tensor.numel() % impl_->size == 0,
            "all_to_all_into: {} elements do not split evenly over {} members", tensor.numel(),
            impl_->size);
  check_output(out, tensor, tensor.numel(), "all_to_all_into");
  if (!engine && staged(*impl_, tensor, "all_to_all_into"))
    return copy_into(out, all_to_all(as_rows(tensor.cpu(), impl_->size), 0, 0));
  run_into(*impl_, engine, "all_to_all", out, tensor, exchange_rows, detail::exchanged_parts);
}

void Communicator::broadcast_(at::Tensor& tensor, int root) const {
  detail::DeviceEngine* engine = device_engine(*impl_, tensor, "broadcast");
  if (!engine && staged(*impl_, tensor, "broadcast")) {
    at::Tensor host = tensor.cpu();
    broadcast_(host, root);
    tensor.copy_(host);
    return;
  }
  NNX_CHECK(root >= 0 && root < impl_->size, "root {} is not a member of a group of {}", root,
            impl_->size);
  if (impl_->size == 1) {
    detail::agree(*impl_, "broadcast", tensor, root);
    return;
  }
  at::Tensor buffer = tensor.contiguous();
  int64_t bytes = buffer.numel() * static_cast<int64_t>(buffer.element_size());
  // Only the root's input is read: the others put nothing on the board.
  const auto on_board = detail::agree(*impl_, "broadcast", tensor, root,
                                      detail::board_input(engine, buffer, true, impl_->rank == root));
  if (on_board && on_board->direct) {
    detail::direct_broadcast(detail::direct_call(*impl_, on_board->sequence, "broadcast"), root,
                             buffer.data_ptr(), static_cast<size_t>(bytes));
  } else if (on_board) {
    detail::board_broadcast(*impl_->board, on_board->sequence, root, impl_->rank,
                            buffer.data_ptr(), static_cast<size_t>(bytes));
  } else if (engine) {
    engine->broadcast(buffer, root);
  } else detail::run_mpi(*impl_, name_, "broadcast", [&](MPI_Request* r) {
    const int count = mpi_count(bytes, "broadcast");
    return r ? MPI_Ibcast(buffer.data_ptr(), count, MPI_BYTE, root, impl_->comm, r)
             : MPI_Bcast(buffer.data_ptr(), count, MPI_BYTE, root, impl_->comm);
  });
  if (!buffer.is_same(tensor)) tensor.copy_(buffer);
}

at::Tensor Communicator::permute(const at::Tensor& tensor,
                                 const std::vector<std::pair<int, int>>& pairs) const {
  detail::DeviceEngine* engine = device_engine(*impl_, tensor, "permute");
  if (!engine && staged(*impl_, tensor, "permute"))
    return permute(tensor.cpu(), pairs).to(tensor.device());
  std::vector<int> source_of(impl_->size, -1), dest_of(impl_->size, -1);
  for (auto [src, dst] : pairs) {
    NNX_CHECK(src >= 0 && src < impl_->size && dst >= 0 && dst < impl_->size,
              "pair ({}, {}) names a member outside 0..{}", src, dst, impl_->size - 1);
    NNX_CHECK(dest_of[src] < 0 && source_of[dst] < 0,
              "pair ({}, {}) repeats a source or a destination; ppermute pairs form a permutation",
              src, dst);
    dest_of[src] = dst;
    source_of[dst] = src;
  }
  // The whole permutation, not only its size: members given different pairs would send where
  // nobody receives (and a later permute would take the stale message).
  uint64_t permutation = pairs.size();
  for (const int dest : dest_of) permutation = permutation * 0x100000001b3ull ^ (dest + 1);
  detail::agree(*impl_, "permute", tensor, static_cast<int64_t>(permutation >> 1));
  at::Tensor local = tensor.contiguous();
  at::Tensor out = torch::zeros_like(local);
  int me = impl_->rank;
  if (dest_of[me] == me) return local.clone();
  if (engine) {
    engine->permute(local, out, source_of[me], dest_of[me]);
    return out;
  }
  int64_t bytes = local.numel() * static_cast<int64_t>(local.element_size());
  int count = mpi_count(bytes, "permute");
  MPI_Request requests[2];
  int n = 0;
  if (source_of[me] >= 0)
    detail::check_mpi(MPI_Irecv(out.data_ptr(), count, MPI_BYTE, source_of[me], 7, impl_->comm,
                                &requests[n++]),
                      "MPI_Irecv");
  if (dest_of[me] >= 0)
    detail::check_mpi(MPI_Isend(local.data_ptr(), count, MPI_BYTE, dest_of[me], 7, impl_->comm,
                                &requests[n++]),
                      "MPI_Isend");
  for (int i = 0; i < n; ++i) detail::wait_for(&requests[i], impl_->comm, "permute", name_.c_str());
  return out;
}

namespace detail {
struct PendingImpl {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Comm comm = MPI_COMM_NULL;
  std::shared_ptr<CommImpl> owner;  // keeps `comm` from being freed while the call is in flight
  std::string comm_name;
  std::vector<at::Tensor> keep_alive;  // the buffers MPI reads and writes until completion
  std::unique_ptr<DeviceCompletion> device;  // a device engine's call, instead of `request`
};
}  // namespace detail

PendingCollective::PendingCollective() = default;
PendingCollective::PendingCollective(PendingCollective&&) noexcept = default;
PendingCollective& PendingCollective::operator=(PendingCollective&& other) noexcept {
  if (this != &other) {
    if (impl_) wait();
    impl_ = std::move(other.impl_);
  }
  return *this;
}
PendingCollective::~PendingCollective() {
  if (impl_ && impl_->device) impl_->device->wait();
  if (impl_ && impl_->request != MPI_REQUEST_NULL)
    detail::wait_for(&impl_->request, impl_->comm, "a nonblocking collective", impl_->comm_name.c_str());
}

bool PendingCollective::test() {
  if (impl_ && impl_->device) return impl_->device->done();
  if (!impl_ || impl_->request == MPI_REQUEST_NULL) return true;
  int done = 0;
  detail::check_mpi(MPI_Test(&impl_->request, &done, MPI_STATUS_IGNORE), "MPI_Test");
  return done != 0;
}

void PendingCollective::wait() {
  if (impl_ && impl_->device) {
    impl_->device->wait();
    impl_->device.reset();
    impl_->owner.reset();
    return;
  }
  if (!impl_ || impl_->request == MPI_REQUEST_NULL) return;
  detail::wait_for(&impl_->request, impl_->comm, "a nonblocking collective", impl_->comm_name.c_str());
  impl_->keep_alive.clear();
}

// complete_at_start: where calls block (blocking_calls), the *_async forms make the blocking
// call and return a finished PendingCollective. Open MPI's nonblocking collectives progress only
// inside MPI calls (no progress thread) and run slower algorithms: an all-reduce takes about
// twice as long, more than the overlap with backward hides on CPU.
PendingCollective Communicator::all_reduce_async_(const at::Tensor& buffer, ReduceOp op) const {
  detail::DeviceEngine* engine = device_engine(*impl_, buffer, "all_reduce_async_");
  if (!engine && staged(*impl_, buffer, "all_reduce_async_")) {  // completes here: the copy
                                                                  // back needs the result
    at::Tensor host = buffer.cpu();
    all_reduce_async_(host, op).wait();
    at::Tensor(buffer).copy_(host);
    return {};
  }
  NNX_CHECK(buffer.is_contiguous() && !detail::reduced_in_float(buffer.scalar_type()),
            "needs a contiguous buffer of a type MPI reduces (not {})",
            c10::toString(buffer.scalar_type()));
  detail::agree(*impl_, "all_reduce_async_", buffer, static_cast<int64_t>(op));
  PendingCollective pending;
  if (impl_->size == 1) return pending;
  if (engine) {
    pending.impl_ = std::make_unique<detail::PendingImpl>();
    pending.impl_->owner = impl_;
    pending.impl_->device = engine->all_reduce_async(buffer, op);
    return pending;
  }
  const int count = mpi_count(buffer.numel(), "all_reduce");
  const MPI_Datatype type = mpi_type(buffer.scalar_type(), "all_reduce");
  const MPI_Op reduce = detail::mpi_reduce_op(op, buffer.scalar_type());
  if (detail::blocking_calls()) {  // see complete_at_start
    detail::run_mpi(*impl_, name_, "all_reduce_async_", [&](MPI_Request*) {
      return MPI_Allreduce(MPI_IN_PLACE, buffer.data_ptr(), count, type, reduce, impl_->comm);
    });
    return pending;
  }
  pending.impl_ = std::make_unique<detail::PendingImpl>();
  pending.impl_->keep_alive = {buffer};
  pending.impl_->comm = impl_->comm;
  pending.impl_->owner = impl_;
  pending.impl_->comm_name = name_;
  detail::check_mpi(MPI_Iallreduce(MPI_IN_PLACE, buffer.data_ptr(), count, type, reduce,
                                   impl_->comm, &pending.impl_->request),
                    "MPI_Iallreduce");
  return pending;
}

PendingCollective Communicator::reduce_scatter_async(const at::Tensor& stacked,
                                                     const at::Tensor& out) const {
  detail::DeviceEngine* engine = device_engine(*impl_, stacked, "reduce_scatter_async");
  if (!engine && staged(*impl_, stacked, "reduce_scatter_async")) {  // completes here
    at::Tensor host_out = out.cpu();
    reduce_scatter_async(stacked.cpu(), host_out).wait();
    at::Tensor(out).copy_(host_out);
    return {};
  }
  NNX_CHECK(stacked.is_contiguous() && out.is_contiguous() && stacked.dim() >= 1 &&
                stacked.size(0) == impl_->size && stacked.numel() == out.numel() * impl_->size &&
                stacked.scalar_type() == out.scalar_type() &&
                !detail::reduced_in_float(out.scalar_type()),
            "needs contiguous [{}, n...] and [n...] buffers of one type MPI reduces; got {} ({}) "
            "and {} ({})",
            impl_->size, c10::toString(stacked.scalar_type()), fmt::join(stacked.sizes(), ", "),
            c10::toString(out.scalar_type()), fmt::join(out.sizes(), ", "));
  detail::agree(*impl_, "reduce_scatter_async", out, 0);
  PendingCollective pending;
  if (impl_->size == 1) {
    out.copy_(stacked.view(out.sizes()));
    return pending;
  }
  if (engine) {
    pending.impl_ = std::make_unique<detail::PendingImpl>();
    pending.impl_->owner = impl_;
    pending.impl_->device = engine->reduce_scatter_async(stacked, out);
    return pending;
  }
  const int count = mpi_count(out.numel(), "reduce_scatter");
  const MPI_Datatype type = mpi_type(out.scalar_type(), "reduce_scatter");
  if (detail::blocking_calls()) {  // see complete_at_start
    detail::run_mpi(*impl_, name_, "reduce_scatter_async", [&](MPI_Request*) {
      return MPI_Reduce_scatter_block(stacked.data_ptr(), out.data_ptr(), count, type, MPI_SUM,
                                      impl_->comm);
    });
    return pending;
  }
  pending.impl_ = std::make_unique<detail::PendingImpl>();
  pending.impl_->keep_alive = {stacked, out};
  pending.impl_->comm = impl_->comm;
  pending.impl_->owner = impl_;
  pending.impl_->comm_name = name_;
  detail::check_mpi(MPI_Ireduce_scatter_block(stacked.data_ptr(), out.data_ptr(), count, type,
                                              MPI_SUM, impl_->comm, &pending.impl_->request),
                    "MPI_Ireduce_scatter_block");
  return pending;
}

void Communicator::barrier() const {
  static const at::Tensor nothing = at::empty({0}, at::kByte);
  // Agreeing on the board is a barrier already: every member has posted.
  const bool on_board = detail::agree(*impl_, "barrier", nothing, 0, {nullptr, 0}).has_value();
  if (impl_->size > 1 && !on_board)
    detail::run_mpi(*impl_, name_, "barrier", [&](MPI_Request* r) {
      return r ? MPI_Ibarrier(impl_->comm, r) : MPI_Barrier(impl_->comm);
    });
}

namespace {

// A child's key: the parent's, the count of children so far (equal on every member, since
// splits and duplicates are collective) and the split color.
uint64_t child_key(detail::CommImpl& parent, int color) {
  uint64_t h = parent.key ^ (++parent.children * 0x9E3779B97F4A7C15ull);
  h = (h ^ static_cast<uint64_t>(static_cast<uint32_t>(color))) * 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 31);
}

std::vector<int> world_ranks_of(MPI_Comm comm) {
  MPI_Group world_group, group;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Comm_group(comm, &group);
  int size = 0;
  MPI_Group_size(group, &size);
  std::vector<int> mine(size), world(size);
  for (int i = 0; i < size; ++i) mine[i] = i;
  MPI_Group_translate_ranks(group, size, mine.data(), world_group, world.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  return world;
}

}  // namespace

Communicator Communicator::duplicate(std::string name) const {
  auto impl = std::make_shared<detail::CommImpl>();
  detail::run_mpi(*impl_, name_, "duplicate",
      [&](MPI_Request* r) {
        return r ? MPI_Comm_idup(impl_->comm, &impl->comm, r) : MPI_Comm_dup(impl_->comm, &impl->comm);
      });
  impl->owned = true;
  ++detail::owned_alive;
  impl->rank = impl_->rank;
  impl->size = impl_->size;
  impl->members = impl_->members;
  impl->key = child_key(*impl_, -1);
  return Communicator(impl, std::move(name));
}

Communicator Communicator::split(int color, int key, std::string name) const {
  auto impl = std::make_shared<detail::CommImpl>();
  barrier();  // bounded: MPI_Comm_split itself has no nonblocking form to wait on
  detail::check_mpi(MPI_Comm_split(impl_->comm, color, key, &impl->comm), "MPI_Comm_split");
  impl->owned = true;
  ++detail::owned_alive;
  MPI_Comm_rank(impl->comm, &impl->rank);
  MPI_Comm_size(impl->comm, &impl->size);
  impl->members = world_ranks_of(impl->comm);
  impl->key = child_key(*impl_, color);
  return Communicator(impl, std::move(name));
}

}  // namespace nnx
