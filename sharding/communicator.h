// Communicator: collectives over a group of processes on local tensors. The MPI engine serves
// CPU tensors; a group of one makes every collective the identity, so code runs anywhere.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace nnx {

enum class ReduceOp { sum, max, min };

namespace detail {
// Collectives reduce half and bfloat16 in float32 (sums of many halves lose too much).
inline bool reduced_in_float(at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16; }
}  // namespace detail

namespace detail {
struct CommImpl;
struct PendingImpl;
}  // namespace detail

// A nonblocking collective in flight (from a *_async call). test() lets MPI progress it and says
// whether it finished; wait() finishes it. Destroying an unfinished one waits for it.
class PendingCollective {
 public:
  PendingCollective();
  PendingCollective(PendingCollective&&) noexcept;
  PendingCollective& operator=(PendingCollective&&) noexcept;
  ~PendingCollective();
  bool test();
  void wait();

 private:
  friend class Communicator;
  std::unique_ptr<detail::PendingImpl> impl_;
};

class Communicator {
 public:
  // The whole MPI world (initialized on first use; a plain run is a world of one).
  static Communicator world();

  int rank() const;
  int size() const;
  std::string name() const { return name_; }

  // In place: every member ends with the reduction of all members' tensors.
  void all_reduce_(at::Tensor& tensor, ReduceOp op = ReduceOp::sum) const;
  // Members' tensors concatenated along dim, in member order (tiled, as jax all_gather tiled).
  at::Tensor all_gather(const at::Tensor& tensor, int64_t dim = 0) const;
  // The sum over members, split along dim into size() chunks; member i keeps chunk i.
  at::Tensor reduce_scatter(const at::Tensor& tensor, int64_t dim = 0) const;
  // Splits along split_dim into size() chunks, sends chunk j to member j, and concatenates the
  // received chunks along concat_dim in member order.
  at::Tensor all_to_all(const at::Tensor& tensor, int64_t split_dim, int64_t concat_dim) const;
  // The same three along dim 0, into an output the caller keeps (as PyTorch's
  // all_gather_into_tensor, reduce_scatter_tensor and all_to_all_single): the tensors are taken
  // flat, in size() equal parts. `out` is contiguous, of the input's dtype and device, with
  // size() times (all_gather_into), 1/size() times (reduce_scatter_into, a sum) or as many
  // (all_to_all_into) elements, in any shape. The engines write into `out` itself; an input that
  // overlaps `out` is copied first, and half types and host-staged CUDA tensors go through the
  // returning forms.
  void all_gather_into(const at::Tensor& out, const at::Tensor& tensor) const;
  void reduce_scatter_into(const at::Tensor& out, const at::Tensor& tensor) const;
  void all_to_all_into(const at::Tensor& out, const at::Tensor& tensor) const;
  // In place: every member ends with root's tensor.
  void broadcast_(at::Tensor& tensor, int root = 0) const;
  // jax.lax.ppermute: pairs (source, destination); a member no pair sends to gets zeros.
  at::Tensor permute(const at::Tensor& tensor, const std::vector<std::pair<int, int>>& pairs) const;
  void barrier() const;

  // Nonblocking forms for overlapping communication with computation. The tensors must be
  // contiguous CPU float, double or integer tensors, left untouched until the wait.
  // all_reduce_ in place into `buffer`:
  PendingCollective all_reduce_async_(const at::Tensor& buffer, ReduceOp op = ReduceOp::sum) const;
  // `stacked` is [size(), n...]: member i receives into `out` [n...] the sum of every member's
  // stacked[i].
  PendingCollective reduce_scatter_async(const at::Tensor& stacked, const at::Tensor& out) const;

  // Splits this group: members with equal color form a group, ordered by key.
  Communicator split(int color, int key, std::string name) const;
  // The same members in a separate communicator: its collectives never match this one's.
  Communicator duplicate(std::string name) const;

  // Debug mode (env NNX_CHECK_COLLECTIVES=1, or set here): every collective first checks that
  // all members agree on the operation, dtype and shape, and throws on every member if not.
  static void set_checking(bool on);
  static bool checking();

  // Every communicator gets a process-wide id; autograd nodes keep the id, not the object. A
  // mesh's communicators are freed with the mesh (by_id then fails, naming the communicator).
  int64_t id() const { return id_; }
  static Communicator by_id(int64_t id);

 private:
  Communicator(std::shared_ptr<detail::CommImpl> impl, std::string name);
  Communicator(std::shared_ptr<detail::CommImpl> impl, std::string name, int64_t id);  // by_id
  std::shared_ptr<detail::CommImpl> impl_;
  std::string name_;
  int64_t id_ = 0;
};

}  // namespace nnx
