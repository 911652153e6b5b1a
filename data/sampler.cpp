// A Fisher-Yates shuffle driven by splitmix64 seeded from (seed, epoch): the same order on every
// platform and process, with no state beyond those two numbers.
#include <nnx/data/sampler.h>

#include <nnx/core/error.h>

#include <numeric>

namespace nnx::data {
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, bound) without modulo bias (rejection of the short last interval).
uint64_t below(uint64_t bound, uint64_t& state) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x;
  do x = splitmix64(state);
  while (x >= limit);
  return x % bound;
}

}  // namespace

GlobalBatchSampler::GlobalBatchSampler(int64_t num_records, SamplerOptions options)
    : num_records_(num_records), options_(options) {
  NNX_CHECK(options_.global_batch > 0, "global_batch must be positive, got {}",
            options_.global_batch);
  NNX_CHECK(num_records_ > 0, "the data source holds no records");
  NNX_CHECK(options_.remainder == Remainder::pad || num_records_ >= options_.global_batch,
            "{} records cannot fill one global batch of {}: lower global_batch or use "
            "Remainder::pad", num_records_, options_.global_batch);
}

int64_t GlobalBatchSampler::steps_per_epoch() const {
  const int64_t b = options_.global_batch;
  return options_.remainder == Remainder::drop ? num_records_ / b : (num_records_ + b - 1) / b;
}

std::vector<int64_t> GlobalBatchSampler::permutation(int64_t epoch) const {
  NNX_CHECK(epoch >= 0, "epoch must be non-negative, got {}", epoch);
  if (epoch == cached_epoch_) return cached_order_;
  std::vector<int64_t> order(static_cast<size_t>(num_records_));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (options_.shuffle) {
    uint64_t state = options_.seed;
    state = splitmix64(state) ^ (static_cast<uint64_t>(epoch) * 0xD1B54A32D192ED03ull);
    for (int64_t i = num_records_ - 1; i > 0; --i)
      std::swap(order[i], order[below(static_cast<uint64_t>(i) + 1, state)]);
  }
  cached_epoch_ = epoch;
  cached_order_ = order;
  return order;
}

std::vector<int64_t> GlobalBatchSampler::batch(int64_t epoch, int64_t step) const {
  NNX_CHECK(step >= 0 && step < steps_per_epoch(), "step {} is outside the epoch's {} steps",
            step, steps_per_epoch());
  if (epoch != cached_epoch_) permutation(epoch);
  const int64_t b = options_.global_batch;
  std::vector<int64_t> out(static_cast<size_t>(b), -1);
  for (int64_t i = 0; i < b; ++i) {
    const int64_t position = step * b + i;
    if (position < num_records_) out[i] = cached_order_[position];
  }
  return out;
}

}  // namespace nnx::data
