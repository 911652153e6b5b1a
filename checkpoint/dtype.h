// Safetensors dtype names ("F32", "BF16", ...) and their sizes, plus overflow-checked element and
// byte counts for shapes read from files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace nnx::checkpoint {

constexpr size_t kMaxRank = 16;
constexpr int64_t kMaxElements = int64_t{1} << 62;  // also the cap on byte counts

// Bytes per element of a safetensors dtype; `context` names what has the dtype, for the error.
size_t dtype_size(std::string_view name, std::string_view context);
bool is_known_dtype(std::string_view name);

// Number of elements of shape: rank <= kMaxRank, dims >= 0, product <= kMaxElements.
int64_t checked_numel(const std::vector<int64_t>& shape, std::string_view context);
// checked_numel(shape) * dtype_size(dtype), at most kMaxElements.
uint64_t checked_nbytes(const std::vector<int64_t>& shape, std::string_view dtype,
                        std::string_view context);

}  // namespace nnx::checkpoint
