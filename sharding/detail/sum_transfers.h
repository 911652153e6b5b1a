// How a direct all-reduce's sums reach every member (direct_collectives.h). Each member sums one
// chunk of all members' buffers into its own, block by block; every other member then needs
// each block. A block moves one of two ways: the chunk's owner writes it into that member's
// buffer, back to front, once all its own sums are done, or the member that needs it reads it
// from the owner, front to back, as the owner's sums become ready. Each block is claimed once,
// on the board, by whichever of the two comes first. A member writes its own blocks first,
// from its cache, and reads only when none is left. Members that end their sums together thus
// only write; a member slow with its sums has the others' sums written to it while they read
// its own, and all end together.
#pragma once

#include <nnx/sharding/detail/direct_collectives.h>

#include <c10/util/SmallVector.h>

#include <cstdint>
#include <functional>

namespace nnx::detail {

class SumTransfers {
 public:
  // `blocks[m]`: how many blocks member m's chunk has (equal on every member; below 2^20).
  SumTransfers(const DirectCall& call, c10::SmallVector<uint64_t, 16> blocks);

  // This member's first `done` blocks hold their sums.
  void summed(uint64_t done) const;
  // Moves blocks until every block this member needs or owns is claimed, and those it claimed
  // are moved: read(from, block) copies block `block` of member `from`'s sums into this member's
  // buffer; write(to, block) copies this member's block `block` into member `to`'s buffer (null:
  // this member only reads). Every member's blocks are all moved once every member has returned.
  void run(const std::function<void(int, uint64_t)>& read,
           const std::function<void(int, uint64_t)>& write) const;
  // Zeroes this member's words, once every member has returned from run: a later collective
  // that reuses the slot then never meets a word it could take for its own, whatever its tag.
  void clear() const;

 private:
  enum class Claim : uint8_t { got, not_ready, none_left };
  // Claims the next block of member `from`'s sums that this member reads (front) or, of its own
  // sums, writes to member `to` (back).
  Claim claim_read(int from, uint64_t& block) const;
  Claim claim_write(int to, uint64_t& block) const;
  // How many of member `m`'s blocks hold their sums; whether a block this member needs can be
  // read now, or none is left to claim.
  uint64_t ready(int m) const;
  bool readable_or_done() const;
  uint64_t* pair_word(int owner, int reader) const;

  const DirectCall& call_;
  c10::SmallVector<uint64_t, 16> blocks_;
  uint64_t tag_;  // this collective's mark on the words it writes; older marks read as zero
};

}  // namespace nnx::detail
