// The safetensors dtype table and checked shape arithmetic.
#include <nnx/checkpoint/dtype.h>
#include <nnx/checkpoint/detail/parse_util.h>
#include <nnx/core/error.h>

#include <array>
#include <utility>

namespace nnx::checkpoint {
namespace {

using detail::shape_text;

// clang-format off
constexpr std::array<std::pair<std::string_view, size_t>, 13> kDtypes = {{
    {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
    {"I8", 1}, {"U8", 1}, {"BOOL", 1}, {"U16", 2}, {"U32", 4}, {"U64", 8},
}};
// clang-format on

}  // namespace

bool is_known_dtype(std::string_view name) {
  for (const auto& [known, size] : kDtypes)
    if (known == name) return true;
  return false;
}

size_t dtype_size(std::string_view name, std::string_view context) {
  for (const auto& [known, size] : kDtypes)
    if (known == name) return size;
  std::vector<std::string_view> names;
  for (const auto& entry : kDtypes) names.push_back(entry.first);
  std::string shown =
      name.size() <= 64 ? std::string(name) : std::string(name.substr(0, 64)) + "...";
  NNX_FAIL("unknown dtype '{}' for {}; known dtypes: {}", shown, context, fmt::join(names, ", "));
}

int64_t checked_numel(const std::vector<int64_t>& shape, std::string_view context) {
  NNX_CHECK(shape.size() <= kMaxRank, "shape of {} has rank {}; at most {} dims are supported",
            context, shape.size(), kMaxRank);
  bool empty = false;
  for (auto d : shape) {
    NNX_CHECK(d >= 0, "shape {} of {} has a negative dim {}", shape_text(shape), context, d);
    empty = empty || d == 0;
  }
  if (empty) return 0;
  int64_t n = 1;
  for (auto d : shape)
    NNX_CHECK(!__builtin_mul_overflow(n, d, &n) && n <= kMaxElements,
              "shape {} of {} has more than 2^62 elements", shape_text(shape), context);
  return n;
}

uint64_t checked_nbytes(const std::vector<int64_t>& shape, std::string_view dtype,
                        std::string_view context) {
  size_t size = dtype_size(dtype, context);
  int64_t numel = checked_numel(shape, context);
  int64_t nbytes = 0;
  NNX_CHECK(
      !__builtin_mul_overflow(numel, static_cast<int64_t>(size), &nbytes) && nbytes <= kMaxElements,
      "shape {} of {} with dtype {} has more than 2^62 bytes", shape_text(shape), context, dtype);
  return static_cast<uint64_t>(nbytes);
}

}  // namespace nnx::checkpoint
