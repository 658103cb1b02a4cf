// Raw Unicode tables behind data/unicode.h, generated into data/unicode_tables.cc by
// tools/make_unicode_tables.py from Python's unicodedata. Only data/unicode.cc reads them; the
// script's docstring says exactly which property each bit means.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ada::data::unicode::tables {

// Disjoint ranges sorted by `first`; code points in no range have bits 0 and ccc 0.
struct PropRange {
  char32_t first;
  char32_t last;
  uint8_t bits;  // unicode::kControl | kWhitespace | ...
  uint8_t ccc;   // canonical combining class
};
// lower(c) = c + delta for c in [first, last] with (c - first) % stride == 0.
struct LowerRun {
  char32_t first;
  char32_t last;
  int32_t stride;
  int32_t delta;
};
// Full canonical decomposition of `cp`: kDecompPool[offset, offset + length).
struct Decomp {
  char32_t cp;
  uint16_t offset;
  uint8_t length;
};

extern const char* const kUnicodeVersion;
extern const PropRange kProps[];
extern const size_t kPropsSize;
extern const LowerRun kLower[];
extern const size_t kLowerSize;
extern const Decomp kDecomp[];
extern const size_t kDecompSize;
extern const char32_t kDecompPool[];

}  // namespace ada::data::unicode::tables
