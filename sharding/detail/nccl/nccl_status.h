// Internal: NCCL results turned into nnx::Error (naming the op, the rank and the fix), and the
// loaded library's version. Compiled only with CUDA parts.
#pragma once

#include <string>

namespace nnx::detail {

// Throws nnx::Error when `result` (an ncclResult_t) is not ncclSuccess.
void nccl_check(int result, const char* op, int rank);
// ncclGetVersion of the loaded library, as "major.minor.patch".
std::string nccl_library_version();
// NCCL_VERSION_CODE of the header nnx was compiled against, as "major.minor.patch".
std::string nccl_header_version();

}  // namespace nnx::detail
