#include <nnx/sharding/detail/agreement.h>

#include <nnx/core/error.h>
#include <nnx/sharding/communicator.h>
#include <nnx/sharding/detail/call_stack.h>
#include <nnx/sharding/detail/mpi_run.h>
#include <nnx/sharding/detail/staged_all_reduce.h>
#include <nnx/sharding/detail/stall_probe.h>

#include <c10/core/DeviceType.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace nnx::detail {

namespace {

// Always on unless NNX_COLLECTIVE_FINGERPRINT=0: members compare a hash of the call (op, dtype,
// shape, argument) before any member returns, on the fingerprint board where they share a machine,
// else by one small all-reduce; so mismatches that would silently give garbage become errors,
// and the full comparison below then names what each rank called.
bool fingerprinting() {
  static const bool on = [] {
    const char* env = std::getenv("NNX_COLLECTIVE_FINGERPRINT");
    return env == nullptr || std::string(env) != "0";
  }();
  return on;
}

// NNX_FINGERPRINT_BOARD=0 compares by all-reduce even where members share a machine.
bool board_allowed() {
  static const bool allowed = [] {
    const char* env = std::getenv("NNX_FINGERPRINT_BOARD");
    return env == nullptr || std::string(env) != "0";
  }();
  return allowed;
}

// The board, opened at the first fingerprinted collective (within `op`).
void open_board(CommImpl& c, const char* op) {
  if (c.board_opened) return;
  c.board = FingerprintBoard::open(c.comm, c.rank, c.size, board_allowed(), reduce_block_bytes(),
                                   op, c.name);
  c.board_opened = true;
}

// `address`: posted with the fingerprint on the board, for members to read directly; `moved`: the
// parts such a call moves, some read while members still post.
bool fingerprints_match(CommImpl& c, uint64_t sequence, const char* op,
                        const at::Tensor& t, int64_t extra, const void* address = nullptr,
                        MovedParts* moved = nullptr) {
  uint64_t h = std::hash<std::string_view>{}(op);
  auto mix = [&h](uint64_t v) {  // splitmix64's finalizer: every input bit reaches every output bit
    h = (h ^ v) + 0x9E3779B97F4A7C15ull;
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    h ^= h >> 31;
  };
  mix(static_cast<uint64_t>(t.scalar_type()));
  mix(static_cast<uint64_t>(t.device().type()));  // a CPU tensor never pairs with a CUDA one
  mix(static_cast<uint64_t>(extra));
  mix(static_cast<uint64_t>(t.dim()));
  for (int64_t d = 0; d < t.dim(); ++d) mix(static_cast<uint64_t>(t.size(d)));
  open_board(c, op);
  if (c.board && moved != nullptr)
    return c.board->agree(sequence, h, c.comm, op, c.name, address, moved->own_part(),
                          [&] { moved->read_posted(*c.board, sequence); });
  if (c.board) return c.board->agree(sequence, h, c.comm, op, c.name, address);
  const int64_t fp = static_cast<int64_t>(h >> 1);  // non-negative, so -fp is safe
  std::array<int64_t, 2> both{fp, -fp};             // max of fp and of -fp: min == max?
  run_mpi(c, c.name, op, [&](MPI_Request* r) {
    return r ? MPI_Iallreduce(MPI_IN_PLACE, both.data(), 2, MPI_INT64_T, MPI_MAX, c.comm, r)
             : MPI_Allreduce(MPI_IN_PLACE, both.data(), 2, MPI_INT64_T, MPI_MAX, c.comm);
  });
  return both[0] == -both[1];
}

template <class T>
std::vector<T> all_gather_fixed(const CommImpl& c, const char* op, const T* mine,
                                int count) {
  std::vector<T> all(static_cast<size_t>(count) * c.size);
  const int bytes = count * static_cast<int>(sizeof(T));
  run_mpi(c, c.name, op, [&](MPI_Request* r) {
    return r ? MPI_Iallgather(mine, bytes, MPI_BYTE, all.data(), bytes, MPI_BYTE, c.comm, r)
             : MPI_Allgather(mine, bytes, MPI_BYTE, all.data(), bytes, MPI_BYTE, c.comm);
  });
  return all;
}

// After a disagreement: each rank's call site (the recorded line, and the frame where its call
// path leaves the others'), one line per rank. Collective over c, on every member alike.
std::vector<std::string> call_sites(const CommImpl& c, const char* op,
                                    const CallStack& stack) {
  constexpr int kFrames = CallStack::kMaxFrames;
  std::array<uint64_t, kFrames + 1> keys{};
  keys[0] = stack.keys.size();
  std::copy(stack.keys.begin(), stack.keys.end(), keys.begin() + 1);
  auto all_keys = all_gather_fixed(c, op, keys.data(), kFrames + 1);
  std::vector<std::vector<uint64_t>> others;
  for (int r = 0; r < c.size; ++r) {
    if (r == c.rank) continue;
    const uint64_t* k = all_keys.data() + r * (kFrames + 1);
    if (k[0] <= 1) continue;  // an origin, not a call path: nothing to compare frames with
    others.emplace_back(k + 1, k + 1 + std::min<uint64_t>(k[0], kFrames));
  }
  std::string site = current_call_site();
  site = site.empty() ? "no recorded line" : "from " + site;
  if (!stack.origin.empty())
    site += ", in " + stack.origin;
  else if (const int frame = first_divergent_frame(stack, others); frame >= 0)
    site += ", in " + describe_frame(stack.addresses[frame]);
  else if (!stack.keys.empty() && !others.empty())
    site += ", the same call path";
  constexpr int kChars = 512;
  std::array<char, kChars> text{};
  std::copy_n(site.begin(), std::min<size_t>(site.size(), kChars - 1), text.begin());
  auto all_text = all_gather_fixed(c, op, text.data(), kChars);
  std::vector<std::string> out;
  for (int r = 0; r < c.size; ++r) out.emplace_back(all_text.data() + r * kChars);
  return out;
}

// Bytes of `input` per member that go on the board. On two members an all-gather reads its
// peer's input directly above 4 KiB where it can: a single copy, where the board copies in and
// out. With inputs unchanged since the last call (an all-gather of parameters repeated in a
// backward pass) the direct read took 0.59-0.69 of MPI's time at 8-16 KiB, the board 0.96-1.43;
// with inputs just written, 0.70-0.72 and 0.60-0.73 (docs/benchmarks.md). On more members the
// board won either way. All-to-alls keep it too: it won with inputs just written (0.40-0.55
// against 0.67-0.72), and with kept ones both stayed below 0.9.
constexpr size_t kTwoMemberGatherRoom = 4 << 10;
// `readable`: the input may be read directly.
size_t board_room(const CommImpl& c, const BoardInput& input, bool readable) {
  if (!c.board) return 0;
  const size_t room = c.board->capacity() / (input.moves_only ? 4 : 1);
  return input.gathers && c.size == 2 && readable ? std::min(room, kTwoMemberGatherRoom) : room;
}

}  // namespace

std::optional<OnBoard> agree(CommImpl& c, const char* op, const at::Tensor& t,
                             int64_t extra, const BoardInput& input) {
  const uint64_t sequence = ++c.calls;
  if (c.size == 1) return std::nullopt;
  bool fingerprints_differ = false;
  const bool full = Communicator::checking();
  if (!full) {
    if (!fingerprinting()) return std::nullopt;
    open_board(c, op);
    const auto bytes = static_cast<size_t>(input.bytes);
    const bool readable = c.board && input.direct_meetings >= 0 && input.bytes > 0 &&
                          bytes <= c.board->direct_limit();
    const bool on_board = c.board && input.bytes >= 0 && bytes <= board_room(c, input, readable);
    const bool through_staging = c.board && input.stageable && input.data != nullptr &&
                                 !on_board && fits_staging(*c.board, c.size, bytes);
    // A board without room for data (NNX_BOARD_COLLECTIVE_BYTES=0) leaves all data to MPI.
    const bool direct = readable && c.board->capacity() > 0 && !on_board && !through_staging;
    if (on_board && input.data != nullptr && input.bytes > 0)
      std::memcpy(c.board->own_region(sequence), input.data, bytes);
    if (through_staging)
      stage_input(*c.board, c.size, c.rank, input.data, bytes, input.element_bytes);
    MovedParts* moved = direct ? input.moved : nullptr;
    if (fingerprints_match(c, sequence, op, t, extra, direct ? input.data : nullptr, moved)) {
      if (direct) c.calls += input.direct_meetings;
      if (through_staging) c.calls += kStagedAllReduceMeetings;
      return on_board || direct || through_staging
                 ? std::optional<OnBoard>(OnBoard{sequence, direct, through_staging, moved})
                 : std::nullopt;
    }
    fingerprints_differ = true;
  }
  const CallStack stack = full ? capture_call_stack() : CallStack{};
  constexpr int kShapeWords = 8, kWords = 7 + kShapeWords;
  std::array<int64_t, kWords> mine{};
  mine[0] = static_cast<int64_t>(std::hash<std::string_view>{}(op) & 0x7fffffff);
  mine[1] = static_cast<int64_t>(t.scalar_type());
  mine[2] = t.dim();
  mine[3] = extra;
  mine[4] = static_cast<int64_t>(sequence);
  mine[5] = static_cast<int64_t>(hash_of(stack) >> 1);
  mine[6] = static_cast<int64_t>(t.device().type());
  for (int64_t d = 0; d < std::min<int64_t>(t.dim(), kShapeWords); ++d) mine[7 + d] = t.size(d);
  // The op's name travels too, for the message.
  constexpr int kNameChars = 24;
  std::array<char, kNameChars> name{};
  std::copy_n(op, std::min<size_t>(std::strlen(op), kNameChars - 1), name.begin());
  auto all = [&] {
    std::optional<WaitingCollective> waiting;
    if (full) waiting.emplace(c.key, c.members, c.name, op, sequence, &stack);
    return all_gather_fixed(c, op, mine.data(), kWords);
  }();
  bool same = true;
  for (int r = 1; r < c.size && same; ++r)
    same = std::equal(all.begin(), all.begin() + kWords, all.begin() + r * kWords);
  if (same && !fingerprints_differ) return std::nullopt;  // differing fingerprints never pass
  auto names = all_gather_fixed(c, op, name.data(), kNameChars);
  auto sites = call_sites(c, op, stack);
  std::string table;
  for (int r = 0; r < c.size; ++r) {
    const int64_t* s = all.data() + r * kWords;
    std::vector<int64_t> shape(s + 7, s + 7 + std::clamp<int64_t>(s[2], 0, kShapeWords));
    table += fmt::format("\n  rank {}: collective #{} on '{}': {} {} ({}) on {} arg {}, {}", r,
                         s[4], c.name, names.data() + r * kNameChars,
                         c10::toString(static_cast<at::ScalarType>(s[1])), fmt::join(shape, ", "),
                         c10::DeviceTypeName(static_cast<c10::DeviceType>(s[6]), true), s[3],
                         sites[r]);
  }
  throw_error(op, fmt::format("members disagree on the collective (rank {} called {} with "
                                      "{} ({})):{}",
                                      c.rank, op, c10::toString(t.scalar_type()),
                                      fmt::join(t.sizes(), ", "), table));
}

BoardInput board_input(const DeviceEngine* engine, const at::Tensor& input,
                       bool moves_only, bool shared, int direct_meetings) {
  if (engine) return {};
  BoardInput board{shared ? input.data_ptr() : nullptr,
                   input.numel() * static_cast<int64_t>(input.element_size()), moves_only,
                   direct_meetings};
  board.element_bytes = input.element_size();
  return board;
}

MovedParts& moved_parts(const OnBoard& on_board) {
  NNX_CHECK(on_board.moved != nullptr,
            "a direct collective without its parts; this is a bug in nnx");
  return *on_board.moved;
}

DirectCall direct_call(const CommImpl& c, uint64_t sequence, const char* op) {
  return {*c.board, sequence, c.size, c.rank, c.comm, op, c.name};
}

size_t input_bytes(const at::Tensor& t) {
  return static_cast<size_t>(t.numel() * t.element_size());
}

MovedParts gathered_parts(const CommImpl& c, const at::Tensor& out,
                                  const at::Tensor& local) {
  const size_t bytes = input_bytes(local);
  return {c.size, c.rank, local.data_ptr(), bytes, 0, out.data_ptr(), bytes};
}
MovedParts exchanged_parts(const CommImpl& c, const at::Tensor& out,
                                   const at::Tensor& send) {
  const size_t bytes = input_bytes(send), chunk = bytes / c.size;
  return {c.size, c.rank, send.data_ptr(), bytes, c.rank * chunk, out.data_ptr(), chunk};
}

std::optional<MovedParts> parts_for(const DeviceEngine* engine, PartsOf parts_of,
                                            const CommImpl& c, const at::Tensor& out,
                                            const at::Tensor& input) {
  if (engine != nullptr) return std::nullopt;
  return parts_of(c, out, input);
}

BoardInput moving_input(const DeviceEngine* engine, const at::Tensor& input,
                        std::optional<MovedParts>& parts, bool gathers) {
  BoardInput board = board_input(engine, input, true);
  board.moved = parts ? &*parts : nullptr;
  board.gathers = gathers;
  return board;
}

}  // namespace nnx::detail
