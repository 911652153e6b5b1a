// A communicator's state, shared by the Communicator handles of one group: the MPI communicator,
// its members, the count of collectives made, and the engines and board opened on first use.
#pragma once

#include <nnx/sharding/detail/device_engine.h>
#include <nnx/sharding/detail/fingerprint_board.h>

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace nnx::detail {

extern std::atomic<int64_t> owned_alive;  // communicators nnx made and has not yet freed

struct CommImpl {
  MPI_Comm comm = MPI_COMM_NULL;
  std::string name;  // the Communicator's, for messages
  bool owned = false;
  int rank = 0;
  int size = 1;
  std::atomic<uint64_t> calls{0};  // collectives made so far: their sequence numbers
  uint64_t key = 1;                // equal on every member, different across communicators
  std::atomic<uint64_t> children{0};  // communicators split or duplicated from this one
  std::vector<int> members;        // world ranks, in this communicator's order
  // The engine for CUDA tensors, chosen at the first CUDA collective (null: host staging).
  bool device_engine_chosen = false;
  std::shared_ptr<DeviceEngine> device_engine;
  // Where members compare fingerprints in shared memory, opened at the first fingerprinted
  // collective (null: members on several machines, who compare by all-reduce).
  bool board_opened = false;
  std::unique_ptr<FingerprintBoard> board;
  ~CommImpl() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned) --owned_alive;
    if (owned && !finalized && comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }
};

}  // namespace nnx::detail
