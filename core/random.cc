#include "core/random.h"

#include <cmath>

namespace ada {

std::array<uint32_t, 4> philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t key) {
  std::array<uint32_t, 4> r;
  philox4x32_block(counter_lo, counter_hi, key, r.data());
  return r;
}

float Generator::uniform_at(uint64_t seed, uint64_t first, uint64_t i) {
  return philox_uniform_at(seed, first, i);
}

float Generator::normal_at(uint64_t seed, uint64_t first, uint64_t i) {
  auto r = philox4x32(first + i, kPhiloxNormalTag, seed);
  float u1 = uint_to_unit_open0(r[0]);  // (0,1]: log is finite
  float u2 = uint_to_unit(r[1]);
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530717958647692f * u2);
}

}  // namespace ada
