#include <nnx/sharding/detail/mpi_reduce_op.h>

#include <nnx/core/error.h>
#include <nnx/sharding/detail/combine.h>

namespace nnx::detail {

namespace {

// inout[i] = inout[i] op in[i], keeping NaNs; only ever given MPI_FLOAT or MPI_DOUBLE
// (mpi_reduce_op).
template <ReduceOp Op>
void keep_nan(void* in, void* inout, int* length, MPI_Datatype* type) {
  const at::ScalarType dtype = *type == MPI_DOUBLE ? at::kDouble : at::kFloat;
  combine(inout, in, *length, dtype, Op, "all_reduce");
}

// Made on first use, after MPI_Init. Declared commutative, as MPI_MAX is: members may then
// combine in different orders, which can only change which of +0 and -0, or which NaN, wins.
template <ReduceOp Op>
MPI_Op made_op() {
  MPI_Op made = MPI_OP_NULL;
  const int status = MPI_Op_create(&keep_nan<Op>, 1, &made);
  NNX_CHECK(status == MPI_SUCCESS, "all_reduce: MPI_Op_create failed (MPI error {})", status);
  return made;
}

MPI_Op nan_keeping(ReduceOp op) {
  static const MPI_Op max = made_op<ReduceOp::max>();
  static const MPI_Op min = made_op<ReduceOp::min>();
  return op == ReduceOp::max ? max : min;
}

}  // namespace

MPI_Op mpi_reduce_op(ReduceOp op, at::ScalarType dtype) {
  const bool floating = dtype == at::kFloat || dtype == at::kDouble;
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::max: return floating ? nan_keeping(op) : MPI_MAX;
    case ReduceOp::min: return floating ? nan_keeping(op) : MPI_MIN;
  }
  return MPI_SUM;
}

}  // namespace nnx::detail
