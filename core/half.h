// Scalar conversions between f32 and the 16-bit float formats (f16, bf16), round to nearest
// even: the CPU's cast_out and the MPI communicator's half-precision sum use them. Host code
// only (f16 through the compiler's _Float16 where it has one — F16C instructions on x86-64-v3 —
// else in software).
#pragma once

#include <cstdint>
#include <cstring>

namespace ada::half {

// The same bits as another type of the same size (std::bit_cast before C++20).
template <class To, class From>
inline To bit_cast(const From& from) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast: sizes differ");
  To to;
  std::memcpy(&to, &from, sizeof(To));
  return to;
}

inline uint16_t bf16_from_float(float f) {
  uint32_t u = bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u)
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_to_float(uint16_t b) {
  return bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// f16 in software (any compiler); the versions below use _Float16 where the compiler has it
// (tests check both agree on every f16 and many f32 bit patterns).
inline uint16_t f16_from_float_soft(float f) {
  const uint32_t x = bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);   // NaN
  if (ax >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520: Inf
  if (ax < 0x38800000u) {                                               // below 2^-14: subnormal
    if (ax < 0x33000000u) return static_cast<uint16_t>(sign);           // below 2^-25: zero
    const uint32_t e = ax >> 23, m = (ax & 0x7FFFFFu) | 0x800000u, shift = 126 - e;
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t r = ax - 0x38000000u;  // exponent rebiased from 127 to 15
  r += 0x0FFFu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}

inline float f16_to_float_soft(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu,
                 m = h & 0x3FFu;
  if (e == 0)
    return bit_cast<float>(
        sign | bit_cast<uint32_t>(static_cast<float>(m) * 5.9604644775390625e-8f));  // m 2^-24
  if (e == 31) return bit_cast<float>(sign | 0x7F800000u | (m << 13));
  return bit_cast<float>(sign | ((e + 112) << 23) | (m << 13));
}

#if defined(__FLT16_MAX__)
#define ADA_HAVE_FLOAT16 1
inline uint16_t f16_from_float(float f) {
  return bit_cast<uint16_t>(static_cast<_Float16>(f));
}
inline float f16_to_float(uint16_t b) {
  return static_cast<float>(bit_cast<_Float16>(b));
}
#else
inline uint16_t f16_from_float(float f) {
  return f16_from_float_soft(f);
}
inline float f16_to_float(uint16_t b) {
  return f16_to_float_soft(b);
}
#endif

}  // namespace ada::half
