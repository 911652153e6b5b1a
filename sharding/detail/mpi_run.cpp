#include <nnx/sharding/detail/mpi_run.h>

#include <nnx/core/error.h>

namespace nnx::detail {

void check_mpi(int code, const char* what) {
  if (code != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, text, &len);
    NNX_FAIL("{} failed: {}", what, std::string(text, len));
  }
}

bool blocking_calls() { return watchdog_available() && !lazy_waits(); }

}  // namespace nnx::detail
