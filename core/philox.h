// Philox4x32-10 (Salmon et al. 2011) as one inline function that compiles for the host and, in
// CUDA files, for the device: the CPU generator (core/random.h) and the CUDA kernels (dropout)
// draw from the very same stream, so a seed means the same masks on both backends.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ADA_HOST_DEVICE __host__ __device__
#else
#define ADA_HOST_DEVICE
#endif

namespace ada {

// One Philox4x32-10 block: out = 4 random 32-bit words for a 128-bit counter and a 64-bit key.
ADA_HOST_DEVICE inline void philox4x32_block(uint64_t counter_lo, uint64_t counter_hi, uint64_t key,
                                             uint32_t out[4]) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

// Maps 32 random bits to a float in [0, 1) (24-bit resolution) and (0, 1] respectively.
ADA_HOST_DEVICE inline float uint_to_unit(uint32_t x) {
  return (x >> 8) * (1.0f / 16777216.0f);
}
ADA_HOST_DEVICE inline float uint_to_unit_open0(uint32_t x) {
  return ((x >> 8) + 1) * (1.0f / 16777216.0f);
}

// Stream tags: uniform and normal draws of one generator use different counter highs.
constexpr uint64_t kPhiloxUniformTag = 0x5eed0001ull;
constexpr uint64_t kPhiloxNormalTag = 0x5eed0002ull;

// Element i of the uniform stream that starts at counter `first` (Generator::uniform_at).
ADA_HOST_DEVICE inline float philox_uniform_at(uint64_t seed, uint64_t first, uint64_t i) {
  uint32_t r[4];
  philox4x32_block(first + i, kPhiloxUniformTag, seed, r);
  return uint_to_unit(r[0]);
}

// Dropout's stream: elements 4j .. 4j+3 are the four words of one Philox block (counter
// first + j), each mapped to [0, 1); a generator's take(n) reserves enough counters. One block
// per four elements, where the uniform stream above spends one per element.
struct Uniform4 {
  float u0, u1, u2, u3;
};
ADA_HOST_DEVICE inline Uniform4 philox_uniform4_at(uint64_t seed, uint64_t first, uint64_t j) {
  uint32_t r[4];
  philox4x32_block(first + j, kPhiloxUniformTag, seed, r);
  return {uint_to_unit(r[0]), uint_to_unit(r[1]), uint_to_unit(r[2]), uint_to_unit(r[3])};
}

}  // namespace ada
