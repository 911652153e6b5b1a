// The process crash_test.cpp kills: saves step after step into argv[1] until killed.
#include "crash_state.h"

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: nnx_crash_saver DIR\n");
    return 2;
  }
  nnx::checkpoint::CheckpointManager manager(argv[1], {.max_to_keep = 3});
  for (int64_t step = manager.latest_step().value_or(-1) + 1;; ++step)
    manager.save(step, nnx_test::crash_state(step));
}
