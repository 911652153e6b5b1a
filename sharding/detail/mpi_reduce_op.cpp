#include <nnx/sharding/detail/mpi_reduce_op.h>

#include <nnx/sharding/detail/combine.h>

namespace nnx::detail {

namespace {

// inout[i] = inout[i] op in[i] for MPI_FLOAT or MPI_DOUBLE, keeping NaNs.
template <ReduceOp Op>
void keep_nan(void* in, void* inout, int* length, MPI_Datatype* type) {
  const at::ScalarType dtype = *type == MPI_DOUBLE ? at::kDouble : at::kFloat;
  combine(inout, in, *length, dtype, Op, "all_reduce");
}

// Made on first use, after MPI_Init; commutative, as max and min are.
MPI_Op nan_keeping(ReduceOp op) {
  static const MPI_Op max = [] {
    MPI_Op made = MPI_OP_NULL;
    MPI_Op_create(&keep_nan<ReduceOp::max>, 1, &made);
    return made;
  }();
  static const MPI_Op min = [] {
    MPI_Op made = MPI_OP_NULL;
    MPI_Op_create(&keep_nan<ReduceOp::min>, 1, &made);
    return made;
  }();
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
