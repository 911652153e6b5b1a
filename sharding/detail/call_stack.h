// Where a collective was called from, for the full collective check (NNX_CHECK_COLLECTIVES=1):
// a call path that compares across ranks, and the user's source line where one was recorded.
#pragma once

#include <cstdint>
#include <source_location>
#include <string>
#include <vector>

namespace nnx::detail {

// This thread's return addresses, innermost first. Keys name each frame by its module and its
// offset there, so they compare across processes whatever the address-space layout.
struct CallStack {
  static constexpr int kMaxFrames = 64;
  std::vector<uint64_t> keys;
  std::vector<void*> addresses;  // this process's, for describe_frame
  std::string origin;            // set under a CollectiveOrigin: it stands for the frames
};
CallStack capture_call_stack();
uint64_t hash_of(const CallStack& stack);
// "main+0x44 (nnx_tests+0x1a2b3)": the function where one is known, and module + offset, which
// `addr2line -Cfe MODULE OFFSET` turns into a line.
std::string describe_frame(void* return_address);

// The first frame, counted from the outermost, where `mine` leaves the call paths of the others
// (index into mine.keys; -1 when no frame of ours differs).
int first_divergent_frame(const CallStack& mine, const std::vector<std::vector<uint64_t>>& all);

// The origin a CollectiveOrigin set on this thread (null when none): it stands for the frames.
const char* current_collective_origin();

// Records the caller's line for the collectives made while it lives: the outermost scope from
// outside the nnx library wins (gather, redistribute, with_sharding_constraint set one).
class CallSiteScope {
 public:
  explicit CallSiteScope(const std::source_location& where);
  ~CallSiteScope();
  CallSiteScope(const CallSiteScope&) = delete;
  CallSiteScope& operator=(const CallSiteScope&) = delete;

 private:
  bool set_ = false;
};
// "tests/foo.cpp:42", or empty when no scope recorded a line.
std::string current_call_site();

}  // namespace nnx::detail
