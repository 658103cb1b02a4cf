// The Unicode pieces of BERT's basic tokenisation: UTF-8 decoding/encoding, per-code-point
// properties (control, whitespace, punctuation, Mn, CJK, word characters), Python's str.lower() per
// code point, and canonical decomposition (NFD). Tables come from Python's unicodedata via
// tools/make_unicode_tables.py, so results equal what HuggingFace's BertTokenizer computes there.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ada::data::unicode {

// Property bits of a code point (see tools/make_unicode_tables.py for the exact definitions).
enum : uint8_t {
  kControl = 1,     // category C* except \t \n \r: dropped by BERT's text cleaning
  kWhitespace = 2,  // ' ', \t, \n, \r or category Zs: becomes ' ' in cleaning
  kSpace = 4,       // Python str.isspace(): str.split() separates words at it
  kPunct = 8,       // ASCII 33-47, 58-64, 91-96, 123-126, or category P*
  kMn = 16,         // category Mn (non-spacing mark): dropped after NFD when stripping accents
  kCjk = 32,        // BERT's CJK ideograph blocks: surrounded by spaces
  kWord = 64,       // str.isalnum() or '_': Python re's \w
};

uint8_t props(char32_t c);
uint8_t combining_class(char32_t c);
// The Unicode version of the tables, e.g. "14.0.0".
const char* version();

// Appends Python's chr(c).lower() (one code point, or two for U+0130).
void append_lower(char32_t c, std::u32string& out);
// Appends the full canonical decomposition of c (Hangul syllables included), unordered across
// characters: call canonical_order() on the whole string afterwards to complete NFD.
void append_decomposition(char32_t c, std::u32string& out);
// Canonical ordering: stable sort of every run of non-zero combining classes by class.
void canonical_order(std::u32string& s);
// NFD of s (decomposition + canonical ordering).
std::u32string nfd(std::u32string_view s);

// UTF-8 -> code points. Each byte of an invalid or overlong sequence, a surrogate or a value
// above U+10FFFF becomes U+FFFD (which BERT's cleaning then drops); never throws.
std::u32string decode_utf8(std::string_view s);
void append_utf8(char32_t c, std::string& out);
std::string encode_utf8(std::u32string_view s);
// True when s is well-formed UTF-8.
bool valid_utf8(std::string_view s);

}  // namespace ada::data::unicode
