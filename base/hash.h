// FNV-1a 64: the checksum of vocabularies and MLM shards, the config's hash, and the fingerprints
// ranks compare (parameter layouts, error messages).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ada {

inline constexpr uint64_t kFnv1aBasis = 0xcbf29ce484222325ull;

// Continues hash `h` over `n` bytes (start from kFnv1aBasis).
inline uint64_t fnv1a64(const void* data, size_t n, uint64_t h = kFnv1aBasis) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}
inline uint64_t fnv1a64(std::string_view s, uint64_t h = kFnv1aBasis) {
  return fnv1a64(s.data(), s.size(), h);
}

}  // namespace ada
