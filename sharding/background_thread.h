// Background threads (a checkpoint writer, a prefetcher) that make collective calls: marked,
// their collectives wait by testing for completion every 200 us between sleeps instead of
// spinning in MPI, so they leave the cores to the threads that train.
#pragma once

namespace nnx {

// Marks the calling thread as a background thread, for the rest of its life.
void mark_background_thread();

}  // namespace nnx
