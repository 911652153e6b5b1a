// Timing helpers for the benchmark programs: medians of many repetitions, JSON lines.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace nnx_bench {

// Median seconds of `reps` calls of fn after `warmup` calls.
template <class Fn> double median_seconds(Fn&& fn, int reps, int warmup = 3) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> times;
  times.reserve(reps);
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    auto t1 = std::chrono::steady_clock::now();
    times.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

}  // namespace nnx_bench
