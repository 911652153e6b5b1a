// Timing helpers for the benchmark programs: medians of many repetitions, JSON lines.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>
#include <vector>

namespace nnx_bench {

// A benchmark's main: run(argc, argv), or its error on stderr after the program's name and 1.
template <class Run> int main_of(const char* program, Run&& run, int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", program, e.what());
    return 1;
  }
}

// The median of `values` (the upper one of an even count).
inline double median(std::vector<double> values) {
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

// Seconds of each of `reps` calls of fn after `warmup` calls.
template <class Fn> std::vector<double> seconds_of_calls(Fn&& fn, int reps, int warmup = 3) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> times;
  times.reserve(reps);
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    auto t1 = std::chrono::steady_clock::now();
    times.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  return times;
}

// Median seconds of `reps` calls of fn after `warmup` calls.
template <class Fn> double median_seconds(Fn&& fn, int reps, int warmup = 3) {
  return median(seconds_of_calls(std::forward<Fn>(fn), reps, warmup));
}

}  // namespace nnx_bench
