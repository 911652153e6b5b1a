// One FNV-1a style step folding a 64-bit value into a running hash (seed: kHashSeed); for keys of
// in-memory caches only, never written anywhere.
#pragma once

#include <cstdint>

namespace nnx::detail {

inline constexpr uint64_t kHashSeed = 0xcbf29ce484222325ull;

inline uint64_t hash_mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull; }

}  // namespace nnx::detail
