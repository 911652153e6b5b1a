// Small collectives move their data on the shared-memory board (board_collectives.h), larger
// ones by reading the members' inputs directly (direct_collectives.h), the largest through MPI:
// all against values computed locally, on 2 and 4 ranks, without the full check (which always
// takes the MPI path).
#include "../catch_after_torch.h"

#include "sharding_test_util.h"

#include <nnx/nnx.h>
#include <nnx/sharding/detail/board_collectives.h>
#include <nnx/sharding/detail/direct_collectives.h>
#include <nnx/sharding/detail/fingerprint_board.h>
#include <nnx/sharding/detail/process_memory.h>
#include <nnx/sharding/detail/staged_all_reduce.h>

#include <mpi.h>
#include <torch/types.h>

#include <unistd.h>

#include <cmath>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using Catch::Matchers::Contains;

namespace {

// Integer-valued contributions: sums are exact in any order, so both paths must match exactly.
at::Tensor contribution(int r, int64_t numel, at::ScalarType dtype) {
  return ((torch::arange(numel, torch::kDouble) * 7 + 13 * r).fmod(101) - 50).to(dtype);
}

// Whether members share a board with room for data (NNX_FINGERPRINT_BOARD=0,
// NNX_BOARD_COLLECTIVE_BYTES=0 or NNX_COLLECTIVE_FINGERPRINT=0 turn it off).
bool board_expected() {
  for (const char* name :
       {"NNX_FINGERPRINT_BOARD", "NNX_BOARD_COLLECTIVE_BYTES", "NNX_COLLECTIVE_FINGERPRINT"}) {
    const char* env = std::getenv(name);
    if (env != nullptr && std::string(env) == "0") return false;
  }
  return true;
}

// Whether larger all-reduces go through the board's staging area, of 1 MiB per member by default
// (NNX_STAGED_ALL_REDUCE_BYTES sets it).
bool staging_expected() {
  const char* env = std::getenv("NNX_STAGED_ALL_REDUCE_BYTES");
  return board_expected() && (env == nullptr || *env == '\0');
}
bool staged_size(int64_t bytes) { return bytes > (64 << 10) && bytes <= (1 << 20); }

// Whether members read each other's inputs directly: the board is there, the environment allows
// it, and the kernel lets this rank read another's memory (asked here independently of nnx, through
// MPI; collective over `world`).
bool direct_expected(const nnx::Communicator& world) {
  const char* env = std::getenv("NNX_DIRECT_COLLECTIVE_BYTES");
  if (!board_expected() || (env != nullptr && std::string(env) == "0")) return false;
  static int64_t word = 0;
  word = 1000 + world.rank();
  const int n = world.size(), me = world.rank();
  nnx_test::CheckingMode full(true);  // the exchange itself goes through MPI
  auto seats = world.all_gather(
      torch::tensor({static_cast<int64_t>(getpid()), reinterpret_cast<int64_t>(&word)}), 0);
  const int peer = (me + 1) % n;
  int64_t seen = 0;
  const bool read = nnx::detail::read_process_memory(
      static_cast<pid_t>(seats[2 * peer].item<int64_t>()),
      reinterpret_cast<const void*>(seats[2 * peer + 1].item<int64_t>()), &seen, sizeof seen);
  auto all_read = torch::tensor({read && seen == 1000 + peer ? 1 : 0});
  world.all_reduce_(all_read, nnx::ReduceOp::min);
  if (all_read.item<int>() == 0) WARN("this kernel does not let ranks read each other's memory");
  return all_read.item<int>() == 1;
}

// A duplicate of `world` whose board has no staging area (NNX_STAGED_ALL_REDUCE_BYTES=0 while its
// first call opens the board): its larger all-reduces read the members' inputs directly.
nnx::Communicator without_staging(const nnx::Communicator& world, const std::string& name) {
  const char* before = std::getenv("NNX_STAGED_ALL_REDUCE_BYTES");
  const std::string kept = before != nullptr ? before : "";
  setenv("NNX_STAGED_ALL_REDUCE_BYTES", "0", 1);
  auto comm = world.duplicate(name);
  auto opening = torch::ones({4});
  comm.all_reduce_(opening);
  if (before != nullptr)
    setenv("NNX_STAGED_ALL_REDUCE_BYTES", kept.c_str(), 1);
  else
    unsetenv("NNX_STAGED_ALL_REDUCE_BYTES");
  CHECK(torch::equal(opening, torch::full({4}, static_cast<float>(world.size()))));
  return comm;
}

// An all_to_all read directly: member `from`'s rows (50000 floats per member's chunk), and what
// member `me` receives of all `n` members' rows.
at::Tensor direct_rows(int n, int from) {
  return torch::arange(50000 * n).to(torch::kFloat) + 1e6 * from;
}
at::Tensor direct_rows_received(int n, int me) {
  std::vector<at::Tensor> received;
  for (int r = 0; r < n; ++r) received.push_back(direct_rows(n, r).narrow(0, 50000 * me, 50000));
  return torch::cat(received, 0);
}

}  // namespace

TEST_CASE("collectives on the board, by direct reads and through MPI equal their definitions",
          "[ranks2][ranks4]") {
  nnx_test::CheckingMode checking(false);
  auto world = nnx::Communicator::world();
  const int n = world.size(), me = world.rank();
  const bool direct = direct_expected(world);
  // 1000 elements lie on the board; 40000 do not, except bytes' max and min (40 KB); 700000
  // reach megabytes.
  const int64_t numel = GENERATE(1000, 40000, 700000);
  for (auto dtype : {at::kFloat, at::kDouble, at::kLong, at::kInt, at::kByte}) {
    CAPTURE(numel, dtype);
    const int64_t rows = numel / n * n;  // splits evenly over the members
    std::vector<at::Tensor> all;
    for (int r = 0; r < n; ++r)
      all.push_back(contribution(r, rows, dtype == at::kByte ? at::kDouble : dtype)
                        .abs()
                        .to(dtype));
    const at::Tensor mine = all[me];
    const int64_t board_before = nnx::detail::board_collectives_run();
    const int64_t direct_before = nnx::detail::direct_collectives_run();
    const int64_t staged_before = nnx::detail::staged_all_reduces_run();

    auto stack = torch::stack(all, 0);
    auto sum = stack.to(torch::kDouble).sum(0).to(dtype);
    if (dtype != at::kByte) {  // sums of bytes wrap; max and min are exact for all
      auto reduced = mine.clone();
      world.all_reduce_(reduced);
      CHECK(torch::equal(reduced, sum));
    }
    auto high = mine.clone(), low = mine.clone();
    world.all_reduce_(high, nnx::ReduceOp::max);
    world.all_reduce_(low, nnx::ReduceOp::min);
    CHECK(torch::equal(high, std::get<0>(stack.max(0))));
    CHECK(torch::equal(low, std::get<0>(stack.min(0))));

    CHECK(torch::equal(world.all_gather(mine, 0), torch::cat(all, 0)));
    auto gathered = torch::full({n * rows}, 7, mine.options());
    world.all_gather_into(gathered, mine);
    CHECK(torch::equal(gathered, torch::cat(all, 0)));

    const int64_t part = rows / n;
    auto sum_part = sum.narrow(0, me * part, part);
    if (dtype != at::kByte) {
      CHECK(torch::equal(world.reduce_scatter(mine, 0), sum_part));
      auto scattered = torch::full({part}, 7, mine.options());
      world.reduce_scatter_into(scattered, mine);
      CHECK(torch::equal(scattered, sum_part));
    }

    std::vector<at::Tensor> received;
    for (int r = 0; r < n; ++r) received.push_back(all[r].narrow(0, me * part, part));
    CHECK(torch::equal(world.all_to_all(mine, 0, 0), torch::cat(received, 0)));
    auto exchanged = torch::full({rows}, 7, mine.options());
    world.all_to_all_into(exchanged, mine);
    CHECK(torch::equal(exchanged, torch::cat(received, 0)));
    // In place: the input is copied first, and the own chunk comes from that copy.
    auto swapped = mine.clone();
    world.all_to_all_into(swapped, swapped);
    CHECK(torch::equal(swapped, torch::cat(received, 0)));

    for (int root = 0; root < n; ++root) {
      auto b = mine.clone();
      world.broadcast_(b, root);
      CHECK(torch::equal(b, all[root]));
    }
    world.barrier();

    // Which path ran: reductions on the board up to 64 KiB per member, collectives that only
    // move data up to 16 KiB, except all-gathers on two members, up to 4 KiB where they can read
    // directly; all-reduces above that through the staging area up to 1 MiB; the rest by direct
    // reads (up to 64 MiB, more than these reach).
    const int64_t bytes = rows * mine.element_size();
    const int scatters = dtype != at::kByte ? 2 : 0, gathers = 2, other_moves = 3 + n;
    const int all_reduces = dtype != at::kByte ? 3 : 2;  // bytes' sums are skipped
    const int reductions = scatters + all_reduces;
    const int64_t gather_room = n == 2 && direct ? (4 << 10) : (16 << 10);
    const int on_board = (bytes <= (64 << 10) ? reductions : 0) +
                         (bytes <= gather_room ? gathers : 0) +
                         (bytes <= (16 << 10) ? other_moves : 0);
    const int staged = staging_expected() && staged_size(bytes) ? all_reduces : 0;
    CHECK(nnx::detail::board_collectives_run() - board_before ==
          (board_expected() ? on_board : 0));
    CHECK(nnx::detail::staged_all_reduces_run() - staged_before == staged);
    CHECK(nnx::detail::direct_collectives_run() - direct_before ==
          (direct ? (bytes > gather_room ? gathers : 0) +
                        (bytes > (16 << 10) ? other_moves : 0) +
                        (bytes > (64 << 10) ? reductions - staged : 0)
                  : 0));
  }
}

TEST_CASE("a float sum on the board has the same bits on every member, in member order",
          "[ranks2][ranks4]") {
  nnx_test::CheckingMode checking(false);
  auto world = nnx::Communicator::world();
  const int n = world.size(), me = world.rank();
  auto generator = at::detail::createCPUGenerator(1234 + me);
  auto x = at::randn({4096}, generator, torch::kFloat) * std::pow(10.f, static_cast<float>(me));
  auto inputs = world.all_gather(x.unsqueeze(0), 0);  // [n, 4096]
  auto reduced = x.clone();
  world.all_reduce_(reduced);
  auto results = world.all_gather(reduced.unsqueeze(0), 0);
  for (int r = 1; r < n; ++r) CHECK(torch::equal(results[r], results[0]));
  if (board_expected()) {
    auto in_order = inputs[0].clone();
    for (int r = 1; r < n; ++r) in_order += inputs[r];
    CHECK(torch::equal(reduced, in_order));
  }
  // A reduce_scatter read directly (64 KiB per member and more) adds in member order too.
  auto big = at::randn({n * 16384}, generator, torch::kFloat) * std::pow(10.f, me % 3);
  auto bigs = world.all_gather(big.unsqueeze(0), 0);  // [n, n * 16384]
  auto part = world.reduce_scatter(big, 0);
  auto in_order = bigs[0].narrow(0, me * 16384, 16384).clone();
  for (int r = 1; r < n; ++r) in_order += bigs[r].narrow(0, me * 16384, 16384);
  if (direct_expected(world)) CHECK(torch::equal(part, in_order));
  CHECK(torch::allclose(part, bigs.to(torch::kDouble).sum(0).narrow(0, me * 16384, 16384)
                                  .to(torch::kFloat), 1e-5, 1e-4));
  // So does an all_reduce read directly, over chunks that do not split evenly and span several
  // blocks of the reads, and every member gets the same bits.
  const auto wide_chunk = static_cast<int64_t>(nnx::detail::reduce_block_bytes() / 4 * 2);
  auto wide = at::randn({n * wide_chunk + 3}, generator, torch::kFloat) * std::pow(10.f, me % 3);
  auto wides = world.all_gather(wide.unsqueeze(0), 0);
  auto wide_sum = wide.clone();
  world.all_reduce_(wide_sum);
  auto wide_order = wides[0].clone();
  for (int r = 1; r < n; ++r) wide_order += wides[r];
  if (direct_expected(world)) CHECK(torch::equal(wide_sum, wide_order));
  auto wide_sums = world.all_gather(wide_sum.unsqueeze(0), 0);
  for (int r = 1; r < n; ++r) CHECK(torch::equal(wide_sums[r], wide_sums[0]));
  CHECK(torch::allclose(wide_sum, wides.to(torch::kDouble).sum(0).to(torch::kFloat), 1e-5, 1e-4));
  // max and min keep a NaN from any member, on the board and read directly.
  auto with_nan = torch::full({8}, static_cast<float>(me));
  if (me == n - 1) with_nan[3] = std::numeric_limits<float>::quiet_NaN();
  auto high = with_nan.clone(), low = with_nan.clone();
  world.all_reduce_(high, nnx::ReduceOp::max);
  world.all_reduce_(low, nnx::ReduceOp::min);
  CHECK(std::isnan(high[3].item<float>()));
  CHECK(std::isnan(low[3].item<float>()));
  CHECK(high[0].item<float>() == static_cast<float>(n - 1));
  CHECK(low[0].item<float>() == 0.f);
  auto wide_nan = torch::full({n * wide_chunk + 3}, static_cast<float>(me));
  if (me == 0) wide_nan[n * wide_chunk + 2] = std::numeric_limits<float>::quiet_NaN();
  auto wide_high = wide_nan.clone(), wide_low = wide_nan.clone();
  world.all_reduce_(wide_high, nnx::ReduceOp::max);
  world.all_reduce_(wide_low, nnx::ReduceOp::min);
  CHECK(std::isnan(wide_high[n * wide_chunk + 2].item<float>()));
  CHECK(std::isnan(wide_low[n * wide_chunk + 2].item<float>()));
  CHECK(torch::equal(wide_high.narrow(0, 0, n * wide_chunk),
                     torch::full({n * wide_chunk}, n - 1.f)));
  CHECK(torch::equal(wide_low.narrow(0, 0, n * wide_chunk), torch::zeros({n * wide_chunk})));
}

TEST_CASE("an all-reduce gives the same bits through the staging area, by direct reads and MPI",
          "[ranks2][ranks4]") {
  nnx_test::CheckingMode checking(false);
  auto world = nnx::Communicator::world();
  const int n = world.size(), me = world.rank();
  auto unstaged = without_staging(world, "unstaged");
  const bool direct = direct_expected(world);
  auto generator = at::detail::createCPUGenerator(77 + me);
  // Chunks that split unevenly and span several blocks, in the staging area's slots (1 MiB per
  // member by default) and above them.
  for (int64_t numel : {int64_t{20000}, int64_t{200003}, int64_t{1000003}}) {
    const bool staged = staging_expected() && staged_size(numel * 4);
    for (auto op : {nnx::ReduceOp::sum, nnx::ReduceOp::max, nnx::ReduceOp::min}) {
      CAPTURE(numel, static_cast<int>(op));
      auto x = at::randn({numel}, generator, torch::kFloat) * std::pow(10.f, me % 3);
      if (op != nnx::ReduceOp::sum && me == n - 1)
        x[numel / 2] = std::numeric_limits<float>::quiet_NaN();
      const auto xs = world.all_gather(x.unsqueeze(0), 0);  // [n, numel]
      auto expected = xs[0].clone();
      for (int r = 1; r < n; ++r) {  // member order; max and min keep a NaN from any member
        const auto& in = xs[r];
        if (op == nnx::ReduceOp::sum) expected += in;
        if (op == nnx::ReduceOp::max)
          expected = torch::where(in > expected | in.isnan(), in, expected);
        if (op == nnx::ReduceOp::min)
          expected = torch::where(in < expected | in.isnan(), in, expected);
      }
      const int64_t staged_before = nnx::detail::staged_all_reduces_run();
      auto through_staging = x.clone(), read_directly = x.clone();
      world.all_reduce_(through_staging, op);
      CHECK(nnx::detail::staged_all_reduces_run() - staged_before == (staged ? 1 : 0));
      unstaged.all_reduce_(read_directly, op);
      CHECK(nnx::detail::staged_all_reduces_run() - staged_before == (staged ? 1 : 0));
      // NaN compares unequal: equal_nan keeps the check exact elsewhere. Where neither the
      // staging area nor direct reads take a sum, MPI sums in an order of its own.
      auto tolerances = [&](bool in_member_order) {
        const bool exact = in_member_order || op != nnx::ReduceOp::sum;
        return std::pair<double, double>{exact ? 0 : 1e-5, exact ? 0 : 1e-4};
      };
      const auto [staged_rtol, staged_atol] = tolerances(staged || direct);
      const auto [direct_rtol, direct_atol] = tolerances(direct);
      CHECK(torch::allclose(through_staging, expected, staged_rtol, staged_atol, true));
      CHECK(torch::allclose(read_directly, expected, direct_rtol, direct_atol, true));
      const auto all_staged = world.all_gather(through_staging.unsqueeze(0), 0);
      for (int r = 1; r < n; ++r)
        CHECK(torch::allclose(all_staged[r], all_staged[0], 0, 0, true));
    }
  }
  // Back-to-back calls of changing sizes, members arriving unevenly: a call's input never lands
  // where a member may still be copying the last call's sums.
  for (int round = 0; round < 12; ++round) {
    const int64_t numel = round % 3 == 0 ? 250000 : round % 3 == 1 ? 20000 : 130000;
    if (me == round % n) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    auto y = torch::arange(numel).to(torch::kFloat).remainder(1000) + me;
    world.all_reduce_(y);
    CHECK(torch::equal(y, (torch::arange(numel).to(torch::kFloat).remainder(1000) * n +
                           n * (n - 1) / 2)));
  }
}

TEST_CASE("small and large collectives interleaved stay in step", "[ranks2][ranks4]") {
  // Board regions alternate by call parity; large calls in between are read directly.
  nnx_test::CheckingMode checking(false);
  auto world = nnx::Communicator::world();
  const int n = world.size(), me = world.rank();
  for (int i = 0; i < 200; ++i) {
    const int64_t numel = i % 3 == 2 ? 20000 * n : 16 * n;
    auto x = torch::full({numel}, static_cast<double>(me + i));
    world.all_reduce_(x);
    REQUIRE(torch::equal(x, torch::full({numel}, static_cast<double>(n * i + n * (n - 1) / 2))));
    // 2 floats lie on the board, 8192 are read directly (a direct all_gather takes one sequence
    // number and lets members leave as soon as their readers are done, a direct all_reduce takes
    // three: the board's regions and slots must still line up).
    const int64_t width = i % 4 == 1 ? 8192 : 2;
    auto g = world.all_gather(torch::full({width}, static_cast<float>(i * n + me)), 0);
    REQUIRE(torch::equal(g, (torch::arange(n) + i * n).to(torch::kFloat).repeat_interleave(width)));
  }
}

TEST_CASE("members disagreeing across the board's size limit get an error on every rank",
          "[ranks2][ranks4]") {
  nnx_test::CheckingMode checking(false);
  auto world = nnx::Communicator::world();
  // Rank 0's input would go through MPI, the others' on the board: caught before data moves.
  auto x = torch::ones({world.rank() == 0 ? 40000 : 100});
  CHECK_THROWS_WITH(world.all_gather(x, 0), Contains("members disagree on the collective"));
  auto y = torch::ones({4});
  world.all_reduce_(y);  // still in step
  CHECK(torch::equal(y, torch::full({4}, static_cast<float>(world.size()))));
}

TEST_CASE("where one member cannot read the others' memory, large calls take MPI on every member",
          "[ranks2][ranks4]") {
  nnx_test::CheckingMode checking(false);
  auto world = nnx::Communicator::world();
  const int n = world.size(), me = world.rank();
  if (!board_expected()) return;
  // The last member's probe of the others fails when the new communicator opens its board.
  if (me == n - 1) nnx::detail::refuse_next_board_probe();
  auto refused = world.duplicate("refused");
  const int64_t direct_before = nnx::detail::direct_collectives_run();
  const int64_t board_before = nnx::detail::board_collectives_run();
  auto x = torch::full({50000}, static_cast<float>(me));  // 200 KB: direct where readable
  CHECK(torch::equal(refused.all_gather(x, 0),
                     torch::arange(n).to(torch::kFloat).repeat_interleave(50000)));
  auto summed = x.clone();
  refused.all_reduce_(summed);
  CHECK(torch::equal(summed, torch::full({50000}, static_cast<float>(n * (n - 1) / 2))));
  auto small = torch::full({4}, static_cast<float>(me));
  refused.all_reduce_(small);  // the board still carries small calls
  CHECK(torch::equal(small, torch::full({4}, static_cast<float>(n * (n - 1) / 2))));
  CHECK(nnx::detail::direct_collectives_run() == direct_before);
  CHECK(nnx::detail::board_collectives_run() - board_before == 1);
  // A communicator opened after it reads directly again.
  auto readable = world.duplicate("readable");
  CHECK(torch::equal(readable.all_gather(x, 0), refused.all_gather(x, 0)));
  CHECK(nnx::detail::direct_collectives_run() - direct_before ==
        (direct_expected(world) ? 1 : 0));
}

TEST_CASE("a board without room for data leaves every call's data to MPI", "[ranks2][ranks4]") {
  nnx_test::CheckingMode checking(false);
  auto world = nnx::Communicator::world();
  const int n = world.size(), me = world.rank();
  if (!board_expected()) return;
  const char* before = std::getenv("NNX_BOARD_COLLECTIVE_BYTES");
  const std::string kept = before != nullptr ? before : "";
  setenv("NNX_BOARD_COLLECTIVE_BYTES", "0", 1);
  auto roomless = world.duplicate("roomless");
  const int64_t direct_before = nnx::detail::direct_collectives_run();
  const int64_t board_before = nnx::detail::board_collectives_run();
  auto small = torch::full({4}, static_cast<float>(me));
  roomless.all_reduce_(small);  // opens the board, reading the setting
  if (before != nullptr)
    setenv("NNX_BOARD_COLLECTIVE_BYTES", kept.c_str(), 1);
  else
    unsetenv("NNX_BOARD_COLLECTIVE_BYTES");
  CHECK(torch::equal(small, torch::full({4}, static_cast<float>(n * (n - 1) / 2))));
  auto large = torch::full({50000}, static_cast<float>(me));
  auto summed = large.clone();
  roomless.all_reduce_(summed);
  CHECK(torch::equal(summed, torch::full({50000}, static_cast<float>(n * (n - 1) / 2))));
  CHECK(torch::equal(roomless.all_gather(large, 0),
                     torch::arange(n).to(torch::kFloat).repeat_interleave(50000)));
  CHECK(nnx::detail::direct_collectives_run() == direct_before);
  CHECK(nnx::detail::board_collectives_run() == board_before);
}

TEST_CASE("a board whose segment cannot hold the staging area opens without it",
          "[ranks2][ranks4]") {
  nnx_test::CheckingMode checking(false);
  auto world = nnx::Communicator::world();
  const int n = world.size(), me = world.rank();
  if (!board_expected()) return;
  // Member 0 makes the segment; its first reservation, with the area, fails as on a full
  // /dev/shm, and the second, without it, holds.
  if (me == 0) nnx::detail::refuse_next_staging_area();
  auto arealess = world.duplicate("arealess");
  const int64_t staged_before = nnx::detail::staged_all_reduces_run();
  const int64_t direct_before = nnx::detail::direct_collectives_run();
  const int64_t board_before = nnx::detail::board_collectives_run();
  auto small = contribution(me, 1000, torch::kFloat);
  arealess.all_reduce_(small);  // opens the board: its data regions are there
  auto expected_small = contribution(0, 1000, torch::kFloat);
  for (int r = 1; r < n; ++r) expected_small += contribution(r, 1000, torch::kFloat);
  CHECK(torch::equal(small, expected_small));
  CHECK(nnx::detail::board_collectives_run() - board_before == 1);
  // 800 KB: a staged size, read directly instead.
  auto large = contribution(me, 200003, torch::kFloat);
  arealess.all_reduce_(large);
  auto expected_large = contribution(0, 200003, torch::kFloat);
  for (int r = 1; r < n; ++r) expected_large += contribution(r, 200003, torch::kFloat);
  CHECK(torch::equal(large, expected_large));
  CHECK(nnx::detail::staged_all_reduces_run() == staged_before);
  CHECK(nnx::detail::direct_collectives_run() - direct_before ==
        (direct_expected(world) ? 1 : 0));
  // The refusal was for one segment: the next communicator stages again.
  auto with_area = world.duplicate("with_area");
  auto again = contribution(me, 200003, torch::kFloat);
  with_area.all_reduce_(again);
  CHECK(torch::equal(again, expected_large));
  CHECK(nnx::detail::staged_all_reduces_run() - staged_before == (staging_expected() ? 1 : 0));
}

TEST_CASE("members disagreeing on a direct collective's shape get an error on every rank",
          "[ranks2][ranks4]") {
  nnx_test::CheckingMode checking(false);
  auto world = nnx::Communicator::world();
  const int n = world.size(), me = world.rank();
  // All but the last member agree on an all_to_all that is read directly; the last calls it on
  // another shape, also read directly. Nothing of the last member's is read, and every member
  // throws.
  auto x = torch::full({(me == n - 1 ? 60000 : 50000) * n}, static_cast<float>(me));
  CHECK_THROWS_WITH(world.all_to_all(x, 0, 0), Contains("members disagree on the collective"));
  // The _into form writes this member's own chunk while the others post where members read
  // directly, and may read the chunks of members that posted the same call before the mismatch
  // showed (each then exact); the last member's chunk never. Through MPI, nothing.
  const int64_t chunk = x.numel() / n;
  auto out = torch::full_like(x, -1.0f);
  CHECK_THROWS_WITH(world.all_to_all_into(out, x), Contains("members disagree on the collective"));
  const bool direct = direct_expected(world);
  for (int m = 0; m < n; ++m) {
    CAPTURE(m);
    auto part = out.narrow(0, m * chunk, chunk);
    const bool written = direct && (m == me || (me != n - 1 && m != n - 1 &&
                                                torch::equal(part, torch::full_like(part, m))));
    CHECK(torch::equal(part, torch::full_like(part, written ? static_cast<float>(m) : -1.0f)));
  }
  auto y = torch::full({50000 * n}, static_cast<float>(me));  // still in step
  CHECK(torch::equal(world.all_to_all(y, 0, 0),
                     torch::arange(n).to(torch::kFloat).repeat_interleave(50000)));
  auto z = torch::ones({4});
  world.all_reduce_(z);
  CHECK(torch::equal(z, torch::full({4}, static_cast<float>(n))));
}

TEST_CASE("the board takes empty, half, strided and overlapping inputs, other dims and groups",
          "[ranks2][ranks4]") {
  nnx_test::CheckingMode checking(false);
  auto world = nnx::Communicator::world();
  const int n = world.size(), me = world.rank();
  auto rows = [&](int r) { return (torch::arange(6 * n) + 100 * r).to(torch::kFloat).view({2, 3 * n}); };
  std::vector<at::Tensor> all;
  for (int r = 0; r < n; ++r) all.push_back(rows(r));

  // Empty tensors move nothing and fail nothing.
  auto empty = torch::empty({0});
  world.all_reduce_(empty);
  CHECK(world.all_gather(torch::empty({0, 3}), 0).sizes() == c10::IntArrayRef({0, 3}));
  auto none = torch::empty({0});
  world.all_to_all_into(none, torch::empty({0}));

  // Half is reduced in float32 and comes back as half.
  auto half = rows(me).to(torch::kHalf);
  world.all_reduce_(half);
  CHECK(half.scalar_type() == torch::kHalf);
  CHECK(torch::equal(half.to(torch::kFloat), torch::stack(all, 0).sum(0)));

  // Along dims other than 0.
  CHECK(torch::equal(world.all_gather(rows(me), 1), torch::cat(all, 1)));
  CHECK(torch::equal(world.reduce_scatter(rows(me), 1),
                     torch::stack(all, 0).sum(0).chunk(n, 1)[me]));
  std::vector<at::Tensor> received;
  for (int r = 0; r < n; ++r) received.push_back(all[r].chunk(n, 1)[me]);
  CHECK(torch::equal(world.all_to_all(rows(me), 1, 0), torch::cat(received, 0)));

  // A strided input that overlaps the output is read in its logical order.
  auto out = (torch::arange(12 * n) + 1000 * me).to(torch::kFloat);
  auto overlapping = out.narrow(0, 0, 12).view({4, 3}).t();
  world.all_gather_into(out, overlapping);
  std::vector<at::Tensor> expected;
  for (int r = 0; r < n; ++r)
    expected.push_back((torch::arange(12) + 1000 * r).to(torch::kFloat).view({4, 3}).t().reshape(-1));
  CHECK(torch::equal(out, torch::cat(expected, 0)));

  // A group whose ranks run backwards from the world's.
  auto reversed = world.split(0, n - 1 - me, "reversed");
  REQUIRE(reversed.rank() == n - 1 - me);
  std::vector<at::Tensor> by_group_rank;
  for (int g = 0; g < n; ++g) by_group_rank.push_back(torch::full({3}, static_cast<float>(n - 1 - g)));
  CHECK(torch::equal(reversed.all_gather(torch::full({3}, static_cast<float>(me)), 0),
                     torch::cat(by_group_rank, 0)));

  // The full check switched on and off between calls.
  for (int i = 0; i < 6; ++i) {
    nnx_test::CheckingMode toggled(i % 2 == 0);
    auto x = torch::full({5}, static_cast<double>(me + i));
    world.all_reduce_(x);
    REQUIRE(torch::equal(x, torch::full({5}, static_cast<double>(n * i + n * (n - 1) / 2))));
  }
}

TEST_CASE("a direct collective's members keep their inputs until a slow reader has read them",
          "[ranks2][ranks4]") {
  nnx_test::CheckingMode checking(false);
  auto world = nnx::Communicator::world();
  const int n = world.size(), me = world.rank();
  if (!direct_expected(world)) return;
  // The last member starts reading 100 ms late (its first read waits, during the meeting or
  // after it); the others overwrite their inputs as soon as their calls return, so a member that
  // left before its reader was done shows as -1s.
  auto x = torch::full({50000}, static_cast<float>(me + 1));
  if (me == n - 1) nnx::detail::pause_direct_reads(100);
  auto g = world.all_gather(x, 0);
  x.fill_(-1);
  CHECK(torch::equal(g, (torch::arange(n) + 1).to(torch::kFloat).repeat_interleave(50000)));
  auto rows = direct_rows(n, me);
  if (me == n - 1) nnx::detail::pause_direct_reads(100);
  auto exchanged = world.all_to_all(rows, 0, 0);
  rows.fill_(-1);
  CHECK(torch::equal(exchanged, direct_rows_received(n, me)));
  auto b = me == 0 ? torch::full({50000}, 7.0f) : torch::zeros({50000});
  if (me == n - 1) nnx::detail::pause_direct_reads(100);
  world.broadcast_(b, 0);
  if (me == 0) b.fill_(-1);
  else CHECK(torch::equal(b, torch::full({50000}, 7.0f)));
  nnx::detail::pause_direct_reads(0);  // unused where a call did not read directly
  auto y = torch::ones({4});
  world.all_reduce_(y);  // still in step
  CHECK(torch::equal(y, torch::full({4}, static_cast<float>(n))));
}

TEST_CASE("members read the parts of those that posted the same call while a late one has not",
          "[ranks4]") {
  nnx_test::CheckingMode checking(false);
  auto world = nnx::Communicator::world();
  const int n = world.size(), me = world.rank();
  if (!direct_expected(world)) return;
  const int late = n - 1;
  CAPTURE(me);
  auto come_late = [&] {
    if (me == late) std::this_thread::sleep_for(std::chrono::milliseconds(600));
  };
  auto opening = torch::ones({4});  // opens the board: its opening would hold the others back
  world.all_reduce_(opening);
  REQUIRE(torch::equal(opening, torch::full({4}, static_cast<float>(n))));
  int64_t early = nnx::detail::direct_reads_early(), asked = nnx::detail::direct_reads_asked();
  auto since = [](int64_t& count, int64_t now) {
    const int64_t before = count;
    count = now;
    return now - before;
  };
  // While the last member sleeps, every other member reads the parts of the n - 2 others that
  // are there; the last reads everything after. A look that starts before the last member posts
  // may find its post while it reads, and read its part then too (n - 1).
  auto read_early = [&](int64_t at_least) {
    const int64_t count = since(early, nnx::detail::direct_reads_early());
    CAPTURE(count);
    if (me == late) return count == 0;
    return count >= at_least && count <= at_least + 1;
  };
  auto x = torch::full({50000}, static_cast<float>(me + 1));
  const auto gathered = (torch::arange(n) + 1).to(torch::kFloat).repeat_interleave(50000);
  come_late();
  CHECK(torch::equal(world.all_gather(x, 0), gathered));
  CHECK(read_early(n - 2));
  auto out = torch::full({50000 * n}, -1.0f);
  come_late();
  world.all_to_all_into(out, direct_rows(n, me));
  CHECK(torch::equal(out, direct_rows_received(n, me)));
  CHECK(read_early(n - 2));
  // A read refused then is asked of its member through MPI once all have posted.
  if (me == 0) nnx::detail::fail_direct_copy();
  come_late();
  CHECK(torch::equal(world.all_to_all(direct_rows(n, me), 0, 0), direct_rows_received(n, me)));
  CHECK(read_early(me == 0 ? n - 3 : n - 2));
  CHECK(since(asked, nnx::detail::direct_reads_asked()) == (me == 0 ? 1 : 0));
  // A late member that disagrees: the others have read each other's parts, and all throw; the
  // inputs are intact and the next calls are in step.
  auto y = torch::full({(me == late ? 60000 : 50000) * n}, static_cast<float>(me));
  auto into = torch::full_like(y, -1.0f);
  come_late();
  CHECK_THROWS_WITH(world.all_to_all_into(into, y), Contains("members disagree on the collective"));
  CHECK(since(early, nnx::detail::direct_reads_early()) == (me == late ? 0 : n - 2));  // never its
  const int64_t chunk = y.numel() / n;
  for (int m = 0; m < n; ++m) {
    CAPTURE(m);
    const bool read = m == me || (me != late && m != late);
    CHECK(torch::equal(into.narrow(0, m * chunk, chunk),
                       torch::full({chunk}, read ? static_cast<float>(m) : -1.0f)));
  }
  CHECK(torch::equal(y, torch::full_like(y, static_cast<float>(me))));
  CHECK(torch::equal(world.all_gather(x, 0), gathered));
  auto z = torch::ones({4});
  world.all_reduce_(z);
  CHECK(torch::equal(z, torch::full({4}, static_cast<float>(n))));
  nnx::detail::fail_direct_copy(-1);  // unused where a call did not read directly
}

TEST_CASE("a refused direct read is asked of its member through MPI, with the same values",
          "[ranks2][ranks4]") {
  nnx_test::CheckingMode checking(false);
  auto world = nnx::Communicator::world();
  const int n = world.size(), me = world.rank();
  if (!direct_expected(world)) return;
  auto x = torch::full({50000}, static_cast<float>(me + 1));  // 200 KB: read directly
  const auto gathered = (torch::arange(n) + 1).to(torch::kFloat).repeat_interleave(50000);
  const auto scattered = torch::full({50000 / n}, static_cast<float>(n * (n + 1) / 2));
  int64_t asked = nnx::detail::direct_reads_asked();
  auto asked_since = [&] {
    const int64_t before = asked;
    asked = nnx::detail::direct_reads_asked();
    return asked - before;
  };
  // The last member's first read of an all_gather fails.
  if (me == n - 1) nnx::detail::fail_direct_copy();
  CHECK(torch::equal(world.all_gather(x, 0), gathered));
  CHECK(asked_since() == (me == n - 1 ? 1 : 0));
  // Member 0's last read of a reduce_scatter (50000 / n floats per member: one block each).
  if (me == 0) nnx::detail::fail_direct_copy(n - 2);
  CHECK(torch::equal(world.reduce_scatter(x, 0), scattered));
  CHECK(asked_since() == (me == 0 ? 1 : 0));
  // A block past the first: a block and a quarter of floats per member's chunk are two blocks,
  // the second partial; each member's chunk holds its position, so a block asked at the wrong
  // offset shows.
  const int64_t per = static_cast<int64_t>(nnx::detail::reduce_block_bytes() / 4) * 5 / 4;
  auto wide = torch::arange(per * n).to(torch::kFloat).remainder(per * n - 7) + me;
  if (me == n - 1) nnx::detail::fail_direct_copy(n - 1);  // the second block's first read
  const auto chunk_sums =
      (torch::arange(per * n).to(torch::kFloat).remainder(per * n - 7) * n +
       n * (n - 1) / 2).narrow(0, per * me, per);
  CHECK(torch::equal(world.reduce_scatter(wide, 0), chunk_sums));
  CHECK(asked_since() == (me == n - 1 ? 1 : 0));
  // Every member's first read of an all_to_all: each asks while others ask of it.
  nnx::detail::fail_direct_copy();
  CHECK(torch::equal(world.all_to_all(direct_rows(n, me), 0, 0), direct_rows_received(n, me)));
  CHECK(asked_since() == 1);
  // A broadcast's reader.
  auto b = me == 0 ? torch::full({50000}, 7.0f) : torch::zeros({50000});
  if (me == n - 1) nnx::detail::fail_direct_copy();
  world.broadcast_(b, 0);
  CHECK(torch::equal(b, torch::full({50000}, 7.0f)));
  CHECK(asked_since() == (me == n - 1 ? 1 : 0));
  // An all_reduce's failed copy is an error on every member, whether a member fails to read the
  // others' inputs (its first read) or to move the sums (20000 floats: one block per member's
  // chunk, so the n - 1 reads before the sums succeed; the next copy reads another's sums or
  // writes its own, whichever it claims first), and where every member fails. (The world's
  // all-reduces of that size go through the staging area, which reads nothing.)
  auto unstaged = without_staging(world, "unstaged");
  auto s = torch::full({20000}, static_cast<float>(me));
  for (int after : {0, n - 1}) {
    CAPTURE(after);
    if (me == n / 2) nnx::detail::fail_direct_copy(after);
    // The others wait before their first read, so member n / 2 sums first and moves sums
    // itself: a member that summed later might find every transfer of the sums already taken,
    // and copy nothing more that could fail.
    if (after > 0 && me != n / 2) nnx::detail::pause_direct_reads(200);
    auto r = s.clone();
    const char* failed = after == 0 ? "this rank could not read member" : "this rank could not";
    CHECK_THROWS_WITH(
        unstaged.all_reduce_(r),
        Contains("copying between the members' memory directly over 'unstaged' failed") &&
            Contains(me == n / 2 ? failed : "another member could not read or write"));
    // A failure among the sums comes after every member summed its own chunk.
    const int64_t lo = 20000 * me / n, hi = 20000 * (me + 1) / n;
    if (after == n - 1)
      CHECK(torch::equal(r.narrow(0, lo, hi - lo),
                         torch::full({hi - lo}, static_cast<float>(n * (n - 1) / 2))));
    nnx::detail::pause_direct_reads(0);
  }
  nnx::detail::fail_direct_copy();
  auto every = s.clone();
  CHECK_THROWS_WITH(unstaged.all_reduce_(every), Contains("this rank could not read member"));
  auto after_failures = s.clone();
  unstaged.all_reduce_(after_failures);
  CHECK(torch::equal(after_failures, torch::full({20000}, static_cast<float>(n * (n - 1) / 2))));
  // A dtype without a reduction is an error on every member before anything is read.
  auto flags = torch::ones({200000}, torch::kBool);
  CHECK_THROWS_WITH(world.all_reduce_(flags), Contains("no reduction for dtype Bool"));
  // The next direct and board calls find every member in step.
  auto summed = s.clone();
  world.all_reduce_(summed);
  CHECK(torch::equal(summed, torch::full({20000}, static_cast<float>(n * (n - 1) / 2))));
  CHECK(torch::equal(world.reduce_scatter(x, 0), scattered));
  CHECK(torch::equal(world.all_gather(x, 0), gathered));
  auto y = torch::ones({4});
  world.all_reduce_(y);
  CHECK(torch::equal(y, torch::full({4}, static_cast<float>(n))));
  nnx::detail::fail_direct_copy(-1);  // unused where a call did not read directly
}

TEST_CASE("a direct all-reduce writes the others' sums to a slow member, or it reads them all",
          "[ranks2][ranks4]") {
  nnx_test::CheckingMode checking(false);
  auto world = nnx::Communicator::world();
  const int n = world.size(), me = world.rank();
  if (!direct_expected(world)) return;
  auto writable = without_staging(world, "writable");
  // The last member's board finds the others' memory readable but not writable: on every member,
  // the sums then move by reads alone.
  if (me == n - 1) nnx::detail::refuse_next_board_writes();
  auto unwritable = without_staging(world, "unwritable");
  // Two and a half blocks per member's chunk, and uneven chunks: three blocks move each way.
  const auto block = static_cast<int64_t>(nnx::detail::reduce_block_bytes() / 4);
  const int64_t numel = block * 5 / 2 * n + 3;
  const int64_t chunk_blocks = (numel * (me + 1) / n - numel * me / n + block - 1) / block;
  auto generator = at::detail::createCPUGenerator(91 + me);
  const auto x = at::randn({numel}, generator, torch::kFloat) * std::pow(10.f, me % 3);
  const auto xs = world.all_gather(x.unsqueeze(0), 0);  // [n, numel]
  auto expected = xs[0].clone();
  for (int r = 1; r < n; ++r) expected += xs[r];  // member order, as the direct sums
  auto written = [&] {
    std::vector<int64_t> blocks;
    for (int m = 0; m < n; ++m) blocks.push_back(nnx::detail::direct_blocks_written(m));
    return blocks;
  };
  const int slow = n - 1;
  for (auto* comm : {&writable, &unwritable}) {
    const bool writes = comm == &writable;
    CAPTURE(writes);
    const auto before = written();
    auto y = x.clone();
    // The slow member starts its sums a second late. The others have summed their chunks long
    // before, and none of their blocks for it is read by it: each writes all of them into its
    // buffer, where members may write.
    if (me == slow) nnx::detail::pause_direct_reads(1000);
    comm->all_reduce_(y);
    CHECK(torch::equal(y, expected));
    const auto after = written();
    for (int m = 0; m < n; ++m) {
      CAPTURE(m);
      const int64_t wrote = after[m] - before[m];
      if (!writes || m == me) CHECK(wrote == 0);
      else if (m == slow) CHECK(wrote == chunk_blocks);
    }
  }
  // A refused write is an error on every member: member 0's first copy after its reads of the
  // others' inputs, while all the others start a second late, so that it has none of their sums
  // to read and writes its own to member 1 first.
  const int64_t reads = (n - 1) * chunk_blocks;
  if (me == 0) nnx::detail::fail_direct_copy(static_cast<int>(reads));
  else nnx::detail::pause_direct_reads(1000);
  auto refused = x.clone();
  CHECK_THROWS_WITH(writable.all_reduce_(refused),
                    Contains("copying between the members' memory directly over 'writable'") &&
                        Contains(me == 0 ? "this rank could not write its sums into member 1's"
                                         : "another member could not read or write"));
  nnx::detail::fail_direct_copy(-1);
  auto again = x.clone();
  writable.all_reduce_(again);  // still in step
  CHECK(torch::equal(again, expected));
}

TEST_CASE("a board's members all sum in member 0's blocks", "[ranks2][ranks4]") {
  // Direct all-reduces count each other's blocks: one block size must hold for all, whatever
  // each member's cache would choose.
  int me = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  auto board = nnx::detail::FingerprintBoard::open(MPI_COMM_WORLD, me, n, true,
                                                   size_t{128 << 10} << me, "test", "world");
  REQUIRE(board != nullptr);
  CHECK(board->block_bytes() == size_t{128 << 10});
}
