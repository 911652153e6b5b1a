// Element-wise combination of one member's contribution into an accumulator, the step every
// reduction that nnx computes itself (on the board, by direct reads) takes member by member.
#pragma once

#include <nnx/sharding/communicator.h>

#include <c10/core/ScalarType.h>

#include <cstdint>

namespace nnx::detail {

// Whether combine() has a loop for `dtype`; check_combinable throws the error naming `who` where
// it has none.
bool combinable(at::ScalarType dtype);
void check_combinable(at::ScalarType dtype, const char* who);

// out[i] = a[i] op b[i] over `n` elements of `dtype`; `out` may be `a` or `b` (the very same
// elements) or lie apart from both. Max and min keep a NaN from either side; integer sums wrap,
// as MPI's do. An unlisted dtype is an error naming `who`.
void combine_into(void* out, const void* a, const void* b, int64_t n, at::ScalarType dtype,
                  ReduceOp op, const char* who);

// acc[i] = acc[i] op in[i].
inline void combine(void* acc, const void* in, int64_t n, at::ScalarType dtype, ReduceOp op,
                    const char* who) {
  combine_into(acc, acc, in, n, dtype, op, who);
}

// out = input(0) op input(1) op ... op input(members - 1), in member order, where input(m) is
// member m's `n` elements (none of them `out`) and members >= 2.
template <class Input>
void combine_members(void* out, int members, Input input, int64_t n, at::ScalarType dtype,
                     ReduceOp op, const char* who) {
  combine_into(out, input(0), input(1), n, dtype, op, who);
  for (int m = 2; m < members; ++m) combine(out, input(m), n, dtype, op, who);
}

}  // namespace nnx::detail
