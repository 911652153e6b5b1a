// NCCL error reporting and version queries (see nccl_status.h).
#include <nnx/sharding/detail/nccl/nccl_status.h>

#include <nnx/core/error.h>

#include <nccl.h>

namespace nnx::detail {
namespace {

std::string version_string(int code) {
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return fmt::format("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100);
}

const char* nccl_fix(ncclResult_t result) {
  switch (result) {
    case ncclUnhandledCudaError:
      return "check the CUDA device each rank selected (one process per GPU)";
    case ncclSystemError:
      return "check the network interfaces and shared memory (NCCL_DEBUG=INFO shows which)";
    case ncclInvalidUsage:
      return "ranks must issue the same collectives in the same order; several ranks on one GPU "
             "need NNX_ENGINE=mpi";
    default:
      return "rerun with NCCL_DEBUG=INFO for NCCL's own account";
  }
}

}  // namespace

void nccl_check(int result, const char* op, int rank) {
  auto status = static_cast<ncclResult_t>(result);
  if (status == ncclSuccess) return;
  throw_error(op, fmt::format("NCCL failed on rank {}: {} ({}); {}", rank,
                              ncclGetErrorString(status), result, nccl_fix(status)));
}

std::string nccl_library_version() {
  int code = 0;
  nccl_check(ncclGetVersion(&code), "nccl_library_version", -1);
  return version_string(code);
}

std::string nccl_header_version() { return version_string(NCCL_VERSION_CODE); }

}  // namespace nnx::detail
