// GlobalBatchSampler: which records make up global batch `step` of `epoch`, as a pure function
// of (seed, epoch, step), so every process agrees without talking and a resumed run sees the
// batches the uninterrupted one would have seen. Not thread-safe (it caches the epoch's order).
#pragma once

#include <cstdint>
#include <vector>

namespace nnx::data {

// What to do with the records left over after the last full batch of an epoch.
enum class Remainder {
  drop,  // skip them (every batch is full)
  pad,   // one last batch, filled up with padding slots (index -1, mask 0)
};

struct SamplerOptions {
  int64_t global_batch = 0;
  uint64_t seed = 0;
  bool shuffle = true;  // a fresh permutation per epoch; false reads records in order
  Remainder remainder = Remainder::drop;
};

class GlobalBatchSampler {
 public:
  GlobalBatchSampler(int64_t num_records, SamplerOptions options);
  int64_t num_records() const { return num_records_; }
  const SamplerOptions& options() const { return options_; }
  int64_t steps_per_epoch() const;
  // The global_batch record indices of batch `step` of `epoch`; -1 marks a padding slot.
  std::vector<int64_t> batch(int64_t epoch, int64_t step) const;
  // The order of the records in `epoch`.
  std::vector<int64_t> permutation(int64_t epoch) const;

 private:
  int64_t num_records_;
  SamplerOptions options_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_order_;
};

}  // namespace nnx::data
