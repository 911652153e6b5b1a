// The MPI op for a reduction: MPI's own, except max and min of floating types, whose MPI
// versions may drop a NaN; those use combine.h's loops, so that every path keeps it.
#pragma once

#include <nnx/sharding/communicator.h>

#include <c10/core/ScalarType.h>
#include <mpi.h>

namespace nnx::detail {

MPI_Op mpi_reduce_op(ReduceOp op, at::ScalarType dtype);

}  // namespace nnx::detail
