// The calling thread's write pace, and the pauses it took.
#include <nnx/checkpoint/detail/write_pace.h>

namespace nnx::checkpoint::detail {

namespace {
thread_local double pace_of_this_thread = 0;
thread_local int64_t pauses_of_this_thread = 0;
}  // namespace

void set_write_pace(double pace) { pace_of_this_thread = pace > 0 ? pace : 0; }
double write_pace() { return pace_of_this_thread; }
void count_paced_pause() { ++pauses_of_this_thread; }
int64_t paced_pauses() { return pauses_of_this_thread; }

}  // namespace nnx::checkpoint::detail
