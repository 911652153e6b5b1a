// The rule default_device() applies, apart from the environment it reads, so tests can try it
// on any machine.
#pragma once

#include <c10/core/Device.h>

namespace nnx::detail {

// `setting` is NNX_DEVICE's value (null when unset).
c10::Device choose_device(const char* setting, int local_rank, int device_count);

}  // namespace nnx::detail
