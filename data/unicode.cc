#include "data/unicode.h"

#include <algorithm>
#include <array>

#include "data/unicode_tables.h"

namespace ada::data::unicode {

namespace {

using namespace tables;

// Hangul syllable arithmetic (Unicode chapter 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;
constexpr int kSCount = kLCount * kNCount;

const PropRange* find_range(char32_t c) {
  const PropRange* end = kProps + kPropsSize;
  const PropRange* it =
      std::upper_bound(kProps, end, c, [](char32_t v, const PropRange& r) { return v < r.first; });
  if (it == kProps) return nullptr;
  --it;
  return c <= it->last ? it : nullptr;
}

// ASCII answers without a search: most text is ASCII.
struct AsciiProps {
  std::array<uint8_t, 128> bits{};
  AsciiProps() {
    for (char32_t c = 0; c < 128; ++c) {
      const PropRange* r = find_range(c);
      bits[c] = r ? r->bits : 0;
    }
  }
};
const AsciiProps& ascii_props() {
  static const AsciiProps p;
  return p;
}

}  // namespace

uint8_t props(char32_t c) {
  if (c < 128) return ascii_props().bits[c];
  const PropRange* r = find_range(c);
  return r ? r->bits : 0;
}

uint8_t combining_class(char32_t c) {
  if (c < 0x300) return 0;
  const PropRange* r = find_range(c);
  return r ? r->ccc : 0;
}

const char* version() {
  return kUnicodeVersion;
}

void append_lower(char32_t c, std::u32string& out) {
  if (c < 128) {
    out.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
    return;
  }
  if (c == 0x130) {  // LATIN CAPITAL LETTER I WITH DOT ABOVE -> i + COMBINING DOT ABOVE
    out.push_back(U'i');
    out.push_back(0x307);
    return;
  }
  const LowerRun* end = kLower + kLowerSize;
  const LowerRun* it =
      std::upper_bound(kLower, end, c, [](char32_t v, const LowerRun& r) { return v < r.first; });
  if (it != kLower) {
    --it;
    if (c <= it->last && (c - it->first) % static_cast<char32_t>(it->stride) == 0) {
      out.push_back(static_cast<char32_t>(static_cast<int64_t>(c) + it->delta));
      return;
    }
  }
  out.push_back(c);
}

void append_decomposition(char32_t c, std::u32string& out) {
  if (c < 0xC0) {
    out.push_back(c);
    return;
  }
  if (c >= kSBase && c < kSBase + kSCount) {
    const int s = static_cast<int>(c - kSBase);
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomp* end = kDecomp + kDecompSize;
  const Decomp* it =
      std::lower_bound(kDecomp, end, c, [](const Decomp& d, char32_t v) { return d.cp < v; });
  if (it != end && it->cp == c) {
    out.append(kDecompPool + it->offset, it->length);
    return;
  }
  out.push_back(c);
}

void canonical_order(std::u32string& s) {
  size_t i = 0;
  while (i < s.size()) {
    if (combining_class(s[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < s.size() && combining_class(s[j]) != 0) ++j;
    if (j - i > 1) {
      std::stable_sort(s.begin() + i, s.begin() + j, [](char32_t a, char32_t b) {
        return combining_class(a) < combining_class(b);
      });
    }
    i = j;
  }
}

std::u32string nfd(std::u32string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (char32_t c : s) append_decomposition(c, out);
  canonical_order(out);
  return out;
}

namespace {

// Decodes one code point at s[i]; returns its length in bytes, or 0 if the sequence is invalid.
size_t decode_one(std::string_view s, size_t i, char32_t& cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  size_t n;
  char32_t min;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp;
    const size_t n = decode_one(s, i, cp);
    if (n == 0) {
      out.push_back(0xFFFD);
      ++i;
    } else {
      out.push_back(cp);
      i += n;
    }
  }
  return out;
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp;
    const size_t n = decode_one(s, i, cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

void append_utf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(c, out);
  return out;
}

}  // namespace ada::data::unicode
