// A one-line progress bar for training loops: step, loss, samples/s and ETA, redrawn in place on
// a terminal, or printed every tenth of the way when the output is a file or a pipe.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace examples {

class ProgressBar {
 public:
  // `first`: steps already done when the bar starts (a resumed epoch).
  ProgressBar(std::string label, int64_t total_steps, int64_t samples_per_step, bool enabled,
              int64_t first = 0, std::string unit = "samples")
      : label_(std::move(label)), unit_(std::move(unit)), total_(total_steps),
        samples_(samples_per_step), first_(first),
        enabled_(enabled), tty_(::isatty(::fileno(stderr))), start_(Clock::now()) {}

  // Call after each step (1-based count of steps done so far in this bar).
  void update(int64_t done, double loss) {
    if (!enabled_) return;
    const auto now = Clock::now();
    const bool last = done == total_;
    const bool tenth = total_ >= 10 ? done % (total_ / 10) == 0 : true;
    if (tty_ ? (!last && now - drawn_ < std::chrono::milliseconds(100)) : !(tenth || last)) return;
    drawn_ = now;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double rate = seconds > 0 ? (done - first_) * samples_ / seconds : 0;
    const double eta = done > first_ ? seconds * (total_ - done) / (done - first_) : 0;
    const int width = 24, filled = static_cast<int>(width * done / std::max<int64_t>(total_, 1));
    std::string bar = std::string(filled, '#') + std::string(width - filled, '.');
    std::fprintf(stderr, "%s%s [%s] %lld/%lld  loss %.4f  %.0f %s/s  ETA %d:%02d%s",
                 tty_ ? "\r" : "", label_.c_str(), bar.c_str(), static_cast<long long>(done),
                 static_cast<long long>(total_), loss, rate, unit_.c_str(), static_cast<int>(eta) / 60,
                 static_cast<int>(eta) % 60, tty_ && !last ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  std::string label_, unit_;
  int64_t total_, samples_, first_;
  bool enabled_, tty_;
  Clock::time_point start_, drawn_{};
};

}  // namespace examples
