// Sharded checkpoints of `gib` GiB float32 (8 row-sharded Params): save/restore against plain
// write()+fsync / read() of each rank's bytes (ratio = nnx s / plain s); train steps during an
// async save. Run: mpirun -np 8 bench_checkpoint [gib=2]. Restore's peak RSS, in fresh processes:
// mpirun -np 8 bench_checkpoint write DIR [gib=2], then restore-rss DIR [other|same]; rm -rf DIR
// Train steps during an async save alone, repeated: mpirun -np 8 bench_checkpoint train [gib] [n].
// Files go to /tmp/nnx_bench_ckpt, or to NNX_BENCH_CKPT_DIR where set.
#include <nnx/nnx.h>

#include <torch/torch.h>

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_util.h"

namespace {

namespace ckpt = nnx::checkpoint;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nnx::P;
constexpr int kArrays = 8, kReps = 3;
constexpr double kGiB = 1 << 30;

double peak_rss_gib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / (1 << 20);  // ru_maxrss is in KiB on Linux
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(fmt::format("[bench_checkpoint] {}", what));
}

// Seconds of fn, barrier to barrier: the collective time.
template <class Fn> double timed(const nnx::Communicator& world, Fn&& fn) {
  world.barrier();
  auto t0 = Clock::now();
  fn();
  world.barrier();
  return seconds_since(t0);
}

int64_t sum_over_ranks(const nnx::Communicator& world, int64_t x) {
  auto t = torch::full({1}, x, torch::kLong);
  world.all_reduce_(t);
  return t.item<int64_t>();
}

// Rows = columns of each array, a multiple of 8 * ranks: kArrays * side^2 * 4 bytes ~ gib.
int64_t side_for(double gib, int64_t ranks) {
  const int64_t step = 8 * ranks;
  return std::max<int64_t>(step, std::llround(std::sqrt(gib * kGiB / 4 / kArrays) / step) * step);
}

// Array i's values at `box`: small integers from the global position, exact in float32, so any
// rank checks any restored block without communication.
at::Tensor pattern(const nnx::Box& box, int64_t i) {
  auto rows = torch::arange(box.start[0], box.start[0] + box.size[0], torch::kFloat) * 7;
  auto cols = torch::arange(box.start[1], box.start[1] + box.size[1], torch::kFloat) * 13;
  return torch::fmod(rows.unsqueeze(1) + cols.unsqueeze(0) + static_cast<double>(i), 1021.0);
}

// kArrays Params side x side, rows split over mesh axis "x"; each rank fills only its blocks.
nnx::State make_state(const std::shared_ptr<const nnx::Mesh>& mesh, int64_t side) {
  nnx::State state;
  const nnx::NamedSharding sharding{mesh, P("x", nnx::none)};
  const nnx::Box box = nnx::block_of({side, side}, sharding.spec, *mesh, mesh->coordinates());
  for (int64_t i = 0; i < kArrays; ++i)
    state.add(fmt::format("w{}", i),
              nnx::Param(nnx::Array::from_local(pattern(box, i), {side, side}, sharding)));
  return state;
}

// Restore targets: shapes and dtypes only, laid out by `sharding`.
nnx::State abstract_state(int64_t side, const nnx::NamedSharding& sharding) {
  nnx::State state;
  for (int64_t i = 0; i < kArrays; ++i) {
    auto value = nnx::Array::abstract({side, side}, torch::kFloat);
    value.set_sharding(sharding);
    state.add(fmt::format("w{}", i), nnx::Param(value));
  }
  return state;
}

// Restored blocks that differ from the saved values, over all ranks (0 when all are right).
int64_t mismatches(const nnx::Communicator& world, const nnx::State& restored) {
  int64_t bad = 0;
  for (int64_t i = 0; i < kArrays; ++i) {
    const nnx::Array& a = restored.at(fmt::format("w{}", i)).value();
    bad += torch::equal(a.local(), pattern(a.local_box(), i)) ? 0 : 1;
  }
  return sum_over_ranks(world, bad);
}

int64_t local_bytes(const nnx::State& state) {
  int64_t n = 0;
  for (const auto& [path, v] : state) n += v.tensor().nbytes();
  return n;
}

// Baselines: this rank's blocks written front to back with write() then fsync, and `bytes` read
// front to back with read() into one new buffer (as restore reads into new blocks).
void plain_write(const std::string& path, const nnx::State& state) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  check(fd >= 0, fmt::format("cannot create '{}': {}", path, std::strerror(errno)));
  for (const auto& [name, v] : state) {
    auto p = static_cast<const char*>(v.tensor().data_ptr());
    for (int64_t left = v.tensor().nbytes(), n = 0; left > 0; p += n, left -= n) {
      n = ::write(fd, p, std::min<int64_t>(left, 1 << 30));
      check(n > 0, fmt::format("write to '{}' failed: {}", path, std::strerror(errno)));
    }
  }
  check(::fsync(fd) == 0 && ::close(fd) == 0, fmt::format("fsync/close of '{}' failed", path));
}

void plain_read(const std::string& path, int64_t bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  check(fd >= 0, fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  auto buffer = torch::empty({bytes}, torch::kByte);
  auto p = static_cast<char*>(buffer.data_ptr());
  for (int64_t done = 0, n = 0; done < bytes; done += n) {
    n = ::read(fd, p + done, std::min<int64_t>(bytes - done, 1 << 30));
    check(n >= 0, fmt::format("read of '{}' failed: {}", path, std::strerror(errno)));
    if (n == 0) check(::lseek(fd, 0, SEEK_SET) == 0, "rewind failed");  // asked for more
  }
  ::close(fd);
}

// Drops the cached (clean, fsynced) pages of a file or directory, so that reads go to the disk.
// Advisory: reads may still hit a cache (the VM host's); dropping all caches needs root and is
// not portable. Restores and plain reads are treated the same way.
void evict(const std::string& path) {
  if (fs::is_directory(path)) {
    for (const auto& e : fs::directory_iterator(path)) evict(e.path().string());
  } else if (int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

using nnx_bench::median;

// 1 and 2: save, then restore onto the same mesh and onto a (2, ranks/2) mesh, each against plain
// files of the same bytes per rank, all ranks at once. One-shot disk timings on a shared VM vary
// 2-3x and depend on their order, so each pair alternates kReps times; medians, and every time.
void bench_save_restore(const nnx::Communicator& world, double gib, const std::string& root) {
  const int64_t ranks = world.size(), side = side_for(gib, ranks);
  auto rows = nnx::make_mesh({ranks}, {"x"});
  auto grid = nnx::make_mesh({2, ranks / 2}, {"a", "b"});
  auto dir = [&](int r) { return fmt::format("{}/save{}", root, r); };
  auto plain = [&](int r) { return fmt::format("{}/plain/{}.{}", root, world.rank(), r); };
  nnx::State state = make_state(rows, side);
  const int64_t total = state.nbytes();
  std::vector<double> save_s, write_s;
  for (int r = 0; r < kReps; ++r) {
    ckpt::io_counts() = {};
    save_s.push_back(timed(world, [&] { ckpt::save(dir(r), state); }));
    write_s.push_back(timed(world, [&] { plain_write(plain(r), state); }));
  }
  const int64_t written = sum_over_ranks(world, ckpt::io_counts().bytes_written);
  check(written == total && ckpt::io_counts().bytes_written == local_bytes(state),
        fmt::format("save wrote {} bytes in all; the state has {}", written, total));
  const double save = median(save_s), write = median(write_s);
  if (world.rank() == 0)
    fmt::print(
        "{{\"bench\": \"checkpoint\", \"op\": \"save\", \"ranks\": {}, \"arrays\": {}, "
        "\"side\": {}, \"state_gib\": {:.3f}, \"bytes_written\": {}, \"save_s\": {:.3f}, "
        "\"save_GiBps\": {:.3f}, \"plain_write_s\": {:.3f}, \"plain_GiBps\": {:.3f}, "
        "\"ratio\": {:.3f}, \"save_s_reps\": [{:.3f}], \"plain_write_s_reps\": [{:.3f}]}}\n",
        ranks, kArrays, side, total / kGiB, written, save, total / kGiB / save, write,
        total / kGiB / write, save / write, fmt::join(save_s, ", "), fmt::join(write_s, ", "));
  for (const nnx::NamedSharding& to :
       {nnx::NamedSharding{rows, P("x", nnx::none)}, nnx::NamedSharding{grid, P("a", "b")}}) {
    const nnx::State target = abstract_state(side, to);
    std::vector<double> restore_s, read_s;
    nnx::State restored;
    for (int r = 0; r < kReps; ++r) {
      evict(dir(kReps - 1));
      ckpt::io_counts() = {};
      restored = {};
      restore_s.push_back(timed(world, [&] { restored = ckpt::restore(dir(kReps - 1), target); }));
      evict(plain(kReps - 1));
      read_s.push_back(
          timed(world, [&] { plain_read(plain(kReps - 1), ckpt::io_counts().bytes_read); }));
    }
    const int64_t read = sum_over_ranks(world, ckpt::io_counts().bytes_read);
    const int64_t verified = sum_over_ranks(world, ckpt::io_counts().chunks_verified);
    check(mismatches(world, restored) == 0, "restored values differ from the saved ones");
    if (side <= 4096) {  // a small run: one whole array against the original, as users would
      auto full = nnx::gather(restored.at("w3").value());
      check(torch::equal(full, pattern(nnx::Box::whole({side, side}), 3)), "gathered w3 differs");
    }
    const double restore = median(restore_s), plain_read_s = median(read_s);
    if (world.rank() == 0)
      fmt::print(
          "{{\"bench\": \"checkpoint\", \"op\": \"restore_{}_mesh\", \"mesh\": \"{}\", "
          "\"spec\": \"{}\", \"bytes_read\": {}, \"chunks_verified\": {}, "
          "\"restore_s\": {:.3f}, \"restore_GiBps\": {:.3f}, \"plain_read_s\": {:.3f}, "
          "\"plain_GiBps\": {:.3f}, \"ratio\": {:.3f}, \"values_equal\": true, "
          "\"restore_s_reps\": [{:.3f}], \"plain_read_s_reps\": [{:.3f}]}}\n",
          to.mesh == rows ? "same" : "other", to.mesh->to_string(), to.spec.to_string(), read,
          verified, restore, total / kGiB / restore, plain_read_s, read / kGiB / plain_read_s,
          restore / plain_read_s, fmt::join(restore_s, ", "), fmt::join(read_s, ", "));
  }
}

// 4: train steps of a column-sharded nnx::MLP right after an async save of the ~gib GiB state
// returned, against plain steps before the save and after it (ratio = with / without;
// ratio_before against the steps before only), and the blocking time of a synchronous save.
void bench_training(const nnx::Communicator& world, double gib, const std::string& root) {
  const int64_t ranks = world.size(), layers = 4, width = 512, batch = 128, steps = 20;
  auto mesh = nnx::make_mesh({ranks}, {"model"});
  nnx::MeshContext on(mesh);
  nnx::Rngs rngs(0);
  const nnx::Metadata columns{.out_sharding = P(nnx::none, "model")};
  nnx::MLP model(std::vector<int64_t>(layers + 1, width), rngs,
                 {.use_bias = false, .kernel_metadata = std::vector(layers, columns)});
  nnx::optim::Optimizer opt(model, nnx::optim::adamw(1e-3));
  torch::manual_seed(0);
  auto x = nnx::device_put(torch::randn({batch, width}), {mesh, P()});
  auto step = [&] {
    auto [loss, grads] =
        nnx::value_and_grad([&](nnx::MLP& m) { return nnx::mean(nnx::square(m(x))); }, model);
    opt.update(model, grads);
  };
  const nnx::State big = make_state(nnx::make_mesh({ranks}, {"x"}), side_for(gib, ranks));
  ckpt::CheckpointManager async_manager(root + "/async", {.async = true});
  ckpt::CheckpointManager sync_manager(root + "/sync", {.async = false});
  // Plain steps before the save and again once it is on disk, so that drift of the machine
  // touches the baseline as it touches the steps in flight.
  const std::vector<double> plain_before = nnx_bench::seconds_of_calls(step, steps);

  world.barrier();
  const auto t0 = Clock::now();
  async_manager.save(1, big);
  const double async_block_s = seconds_since(t0);
  const std::string manifest = async_manager.step_dir(1) + "/manifest.json";
  std::vector<double> all, in_flight;  // in flight: begun before this rank saw the commit
  for (int64_t i = 0; i < steps; ++i) {
    const bool pending = !fs::exists(manifest);
    const auto s0 = Clock::now();
    step();
    all.push_back(seconds_since(s0));
    if (pending) in_flight.push_back(all.back());
  }
  const double steps_s = seconds_since(t0) - async_block_s;
  async_manager.wait_until_finished();
  world.barrier();
  const double async_total_s = seconds_since(t0);
  std::vector<double> plain = nnx_bench::seconds_of_calls(step, steps);
  plain.insert(plain.end(), plain_before.begin(), plain_before.end());
  const double no_save = median(plain), no_save_before = median(plain_before);
  const double sync_s = timed(world, [&] { sync_manager.save(1, big); });
  const double with_save = in_flight.empty() ? NAN : median(in_flight);
  if (world.rank() == 0)
    fmt::print(
        "{{\"bench\": \"checkpoint\", \"op\": \"train_step\", \"layers\": {}, \"width\": {}, "
        "\"batch\": {}, \"steps\": {}, \"saved_gib\": {:.3f}, \"step_ms_no_save\": {:.2f}, "
        "\"step_ms_async_save_in_flight\": {:.2f}, \"steps_in_flight\": {}, "
        "\"step_ms_all_after_save\": {:.2f}, \"ratio\": {:.3f}, "
        "\"step_ms_no_save_before\": {:.2f}, \"ratio_before\": {:.3f}, \"steps_s\": {:.3f}, "
        "\"async_save_blocking_s\": {:.3f}, \"async_save_total_s\": {:.3f}, "
        "\"sync_save_blocking_s\": {:.3f}}}\n",
        layers, width, batch, steps, big.nbytes() / kGiB, no_save * 1e3, with_save * 1e3,
        in_flight.size(), median(all) * 1e3, with_save / no_save, no_save_before * 1e3,
        with_save / no_save_before, steps_s, async_block_s, async_total_s, sync_s);
}

// 3, first process: a checkpoint in `dir` for restore-rss (the side in its metadata).
void write_only(const nnx::Communicator& world, const std::string& dir, double gib) {
  const int64_t side = side_for(gib, world.size());
  nnx::State state = make_state(nnx::make_mesh({world.size()}, {"x"}), side);
  const double s = timed(world, [&] { ckpt::save(dir, state, {.metadata = {{"side", side}}}); });
  if (world.rank() == 0)
    fmt::print(
        "{{\"bench\": \"checkpoint\", \"op\": \"write\", \"dir\": \"{}\", \"side\": {}, "
        "\"state_gib\": {:.3f}, \"save_s\": {:.3f}}}\n",
        dir, side, state.nbytes() / kGiB, s);
}

// 3, second process: restore first thing, so that the peak RSS it leaves is restore's own.
void restore_rss(const nnx::Communicator& world, const std::string& dir, const std::string& onto) {
  const int64_t ranks = world.size(), side = ckpt::read_metadata(dir)["side"];
  const nnx::NamedSharding to =
      onto == "same" ? nnx::NamedSharding{nnx::make_mesh({ranks}, {"x"}), P("x", nnx::none)}
                     : nnx::NamedSharding{nnx::make_mesh({2, ranks / 2}, {"a", "b"}), P("a", "b")};
  const nnx::State target = abstract_state(side, to);
  const double before = peak_rss_gib();
  world.barrier();
  const auto t0 = Clock::now();
  nnx::State restored = ckpt::restore(dir, target);
  const double seconds = seconds_since(t0), after = peak_rss_gib();
  const double share = local_bytes(restored) / kGiB;
  check(mismatches(world, restored) == 0, "restored values differ from the saved ones");
  fmt::print(
      "{{\"bench\": \"checkpoint\", \"op\": \"restore_rss\", \"rank\": {}, \"mesh\": \"{}\", "
      "\"spec\": \"{}\", \"local_share_gib\": {:.3f}, \"peak_rss_before_gib\": {:.3f}, "
      "\"peak_rss_after_gib\": {:.3f}, \"peak_rss_over_share\": {:.3f}, "
      "\"restore_s\": {:.3f}}}\n",
      world.rank(), to.mesh->to_string(), to.spec.to_string(), share, before, after,
      (after - before) / share, seconds);
}

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);  // the ranks share a few cores: one intra-op thread each
  auto world = nnx::Communicator::world();
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "write" || mode == "restore-rss") {
    check(argc > 2, "usage: bench_checkpoint write DIR [gib] | restore-rss DIR [other|same]");
    if (mode == "write") write_only(world, argv[2], argc > 3 ? std::stod(argv[3]) : 2.0);
    else restore_rss(world, argv[2], argc > 3 ? argv[3] : "other");
    return 0;
  }
  const bool train_only = mode == "train";  // only part 4, repeated `repeats` times
  const double gib = argc > 1 + train_only ? std::stod(argv[1 + train_only]) : 2.0;
  const int repeats = train_only && argc > 3 ? std::stoi(argv[3]) : 1;
  // Removed at the end; NNX_BENCH_CKPT_DIR picks another file system.
  const char* root_env = std::getenv("NNX_BENCH_CKPT_DIR");
  const std::string root = root_env ? root_env : "/tmp/nnx_bench_ckpt";
  if (world.rank() == 0) {
    fs::remove_all(root);
    fs::create_directories(root + "/plain");
  }
  world.barrier();
  const auto t0 = Clock::now();
  if (!train_only) bench_save_restore(world, gib, root);
  for (int i = 0; i < repeats; ++i) {
    if (world.rank() == 0 && i > 0) {
      fs::remove_all(root + "/async");
      fs::remove_all(root + "/sync");
    }
    world.barrier();
    bench_training(world, gib, root);
  }
  world.barrier();
  if (world.rank() == 0) {
    fs::remove_all(root);
    fmt::print("{{\"bench\": \"checkpoint\", \"op\": \"total\", \"seconds\": {:.1f}}}\n",
               seconds_since(t0));
  }
  return 0;
}
