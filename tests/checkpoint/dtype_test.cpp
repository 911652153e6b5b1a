// Safetensors dtype sizes and the overflow-checked element and byte counts.
#include "../catch_after_torch.h"

#include <nnx/checkpoint/dtype.h>
#include <nnx/core/error.h>

using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using namespace nnx::checkpoint;

TEST_CASE("dtype_size knows every safetensors dtype nnx stores") {
  CHECK(dtype_size("F64", "t") == 8);
  CHECK(dtype_size("F32", "t") == 4);
  CHECK(dtype_size("F16", "t") == 2);
  CHECK(dtype_size("BF16", "t") == 2);
  CHECK(dtype_size("I64", "t") == 8);
  CHECK(dtype_size("I32", "t") == 4);
  CHECK(dtype_size("I16", "t") == 2);
  CHECK(dtype_size("I8", "t") == 1);
  CHECK(dtype_size("U8", "t") == 1);
  CHECK(dtype_size("BOOL", "t") == 1);
  CHECK(dtype_size("U16", "t") == 2);
  CHECK(dtype_size("U32", "t") == 4);
  CHECK(dtype_size("U64", "t") == 8);
  CHECK(is_known_dtype("BF16"));
  CHECK_FALSE(is_known_dtype("bf16"));
  CHECK_FALSE(is_known_dtype("F8_E4M3"));
  CHECK_FALSE(is_known_dtype(""));
}

TEST_CASE("an unknown dtype is an error naming the context and the known dtypes") {
  CHECK_THROWS_WITH(dtype_size("f32", "tensor 'w' in 'a.safetensors'"),
                    Equals("[dtype_size] unknown dtype 'f32' for tensor 'w' in 'a.safetensors'; "
                           "known dtypes: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, U16, "
                           "U32, U64"));
}

TEST_CASE("checked_numel multiplies dims and rejects negative dims, high rank and overflow") {
  CHECK(checked_numel({}, "x") == 1);
  CHECK(checked_numel({2, 3, 4}, "x") == 24);
  CHECK(checked_numel({int64_t{1} << 31, int64_t{1} << 31}, "x") == int64_t{1} << 62);
  CHECK(checked_numel({int64_t{1} << 62, int64_t{1} << 62, 0}, "x") == 0);  // empty, no overflow
  CHECK(checked_numel(std::vector<int64_t>(16, 1), "x") == 1);
  CHECK_THROWS_WITH(checked_numel({2, -3}, "variable 'w'"),
                    Equals("[checked_numel] shape (2, -3) of variable 'w' has a negative dim -3"));
  CHECK_THROWS_WITH(checked_numel(std::vector<int64_t>(17, 1), "variable 'w'"),
                    Equals("[checked_numel] shape of variable 'w' has rank 17; at most 16 dims "
                           "are supported"));
  CHECK_THROWS_WITH(checked_numel({int64_t{1} << 31, int64_t{1} << 31, 2}, "variable 'w'"),
                    Contains("(2147483648, 2147483648, 2) of variable 'w' has more than 2^62"));
  CHECK_THROWS_AS(checked_numel({INT64_MAX, INT64_MAX}, "x"), nnx::Error);
}

TEST_CASE("checked_nbytes is numel times dtype size, capped at 2^62 bytes") {
  CHECK(checked_nbytes({2, 3}, "BF16", "x") == 12);
  CHECK(checked_nbytes({}, "F64", "x") == 8);
  CHECK(checked_nbytes({0, 7}, "F32", "x") == 0);
  CHECK(checked_nbytes({int64_t{1} << 31, int64_t{1} << 31}, "U8", "x") == uint64_t{1} << 62);
  CHECK_THROWS_WITH(checked_nbytes({int64_t{1} << 31, int64_t{1} << 31}, "F32", "tensor 't'"),
                    Contains("of tensor 't' with dtype F32 has more than 2^62 bytes"));
  CHECK_THROWS_WITH(checked_nbytes({1}, "Q4", "tensor 't'"), Contains("unknown dtype 'Q4'"));
}
