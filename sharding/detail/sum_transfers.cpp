// The board's shared words of a member's slot (FingerprintBoard::shared_words): word 0 counts the
// member's blocks that hold their sums; word 1 + m counts the blocks of its sums claimed for
// member m, those m reads from the front and those the member writes from the back. Each word
// carries the collective's tag in its top 24 bits, so a word last written by an earlier
// collective reads as zero; each member also zeroes its words once all are done with them.
#include <nnx/sharding/detail/sum_transfers.h>

#include <nnx/sharding/detail/exit_protocol.h>

#include <fmt/format.h>

#include <atomic>
#include <utility>

namespace nnx::detail {

namespace {

constexpr int kTagShift = 40;
constexpr uint64_t kCountMask = (uint64_t{1} << kTagShift) - 1;
constexpr int kBackShift = 20;
constexpr uint64_t kMaxBlocks = uint64_t{1} << kBackShift;  // a front or back count's field

std::atomic_ref<uint64_t> shared(uint64_t* word) { return std::atomic_ref<uint64_t>(*word); }

// A word's count (zero where an earlier collective wrote it).
uint64_t count_of(uint64_t word, uint64_t tag) {
  return word >> kTagShift == tag ? word & kCountMask : 0;
}

// A pair word's count, split: blocks claimed from the front and from the back.
struct Claimed {
  uint64_t front, back;
};
Claimed claimed(uint64_t counts) { return {counts & (kMaxBlocks - 1), counts >> kBackShift}; }

}  // namespace

SumTransfers::SumTransfers(const DirectCall& call, c10::SmallVector<uint64_t, 16> blocks)
    : call_(call), blocks_(std::move(blocks)), tag_(sequence_field(call.sequence)) {
  for (const uint64_t n : blocks_)
    if (n >= kMaxBlocks)
      abort_job(fmt::format("in {}: a chunk of {} blocks over '{}' is more than the board "
                            "counts; this is a bug in nnx",
                            call.op, n, call.comm_name));
}

uint64_t* SumTransfers::pair_word(int owner, int reader) const {
  return call_.board.shared_words(owner, call_.sequence) + 1 + reader;
}

void SumTransfers::summed(uint64_t done) const {
  shared(call_.board.shared_words(call_.me, call_.sequence))
      .store(tag_ << kTagShift | done, std::memory_order_release);
  call_.board.wake_sleepers();
}

uint64_t SumTransfers::ready(int m) const {
  const uint64_t word =
      shared(call_.board.shared_words(m, call_.sequence)).load(std::memory_order_acquire);
  return count_of(word, tag_);
}

SumTransfers::Claim SumTransfers::claim_read(int from, uint64_t& block) const {
  auto word = shared(pair_word(from, call_.me));
  uint64_t seen = word.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t counts = count_of(seen, tag_);
    const auto [front, back] = claimed(counts);
    if (front + back >= blocks_[from]) return Claim::none_left;
    if (front >= ready(from)) return Claim::not_ready;
    if (word.compare_exchange_weak(seen, tag_ << kTagShift | (counts + 1),
                                   std::memory_order_acq_rel, std::memory_order_acquire)) {
      block = front;
      return Claim::got;
    }
  }
}

SumTransfers::Claim SumTransfers::claim_write(int to, uint64_t& block) const {
  auto word = shared(pair_word(call_.me, to));
  uint64_t seen = word.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t counts = count_of(seen, tag_);
    const auto [front, back] = claimed(counts);
    const uint64_t n = blocks_[call_.me];
    if (front + back >= n) return Claim::none_left;
    if (word.compare_exchange_weak(seen, tag_ << kTagShift | (counts + (uint64_t{1} << kBackShift)),
                                   std::memory_order_acq_rel, std::memory_order_acquire)) {
      block = n - 1 - back;
      return Claim::got;
    }
  }
}

void SumTransfers::clear() const {
  uint64_t* words = call_.board.shared_words(call_.me, call_.sequence);
  for (int w = 0; w <= call_.members; ++w) shared(words + w).store(0, std::memory_order_relaxed);
}

bool SumTransfers::readable_or_done() const {
  bool left = false;
  for (int m = 0; m < call_.members; ++m) {
    if (m == call_.me) continue;
    const auto [front, back] =
        claimed(count_of(shared(pair_word(m, call_.me)).load(std::memory_order_acquire), tag_));
    if (front + back >= blocks_[m]) continue;
    if (front < ready(m)) return true;
    left = true;
  }
  return !left;
}

void SumTransfers::run(const std::function<void(int, uint64_t)>& read,
                       const std::function<void(int, uint64_t)>& write) const {
  for (;;) {
    // This member's own blocks first, while its cache still holds them (the last summed first):
    // one to each member that still needs one, so a block goes to all of them in turn.
    bool moved = false;
    for (int step = 1; step < call_.members && write; ++step) {
      const int to = (call_.me + step) % call_.members;
      uint64_t block = 0;
      if (claim_write(to, block) != Claim::got) continue;
      write(to, block);
      call_.board.wake_sleepers();  // the claim may have left a waiting reader nothing to read
      moved = true;
    }
    if (moved) continue;
    // Then every block of the others' that is ready, each member starting with the one after it.
    bool waiting = false;
    for (int step = 1; step < call_.members; ++step) {
      const int from = (call_.me + step) % call_.members;
      uint64_t block = 0;
      Claim claim;
      while ((claim = claim_read(from, block)) == Claim::got) {
        read(from, block);
        moved = true;
      }
      waiting = waiting || claim == Claim::not_ready;
    }
    if (moved) continue;
    if (!waiting) return;
    call_.board.wait_until_ready([&] { return readable_or_done(); }, call_.comm, call_.op,
                                 call_.comm_name);
  }
}

}  // namespace nnx::detail
