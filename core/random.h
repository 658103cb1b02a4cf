// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011).
// A Generator is (seed, offset). A draw of n numbers reads counters [offset, offset + n) and
// advances offset, so element i of a draw is a pure function of (seed, offset + i): results do
// not depend on thread count or on the order in which threads fill a tensor. The state is two
// integers, saved and restored exactly in checkpoints.
#pragma once

#include <array>
#include <cstdint>

#include "core/philox.h"

namespace ada {

// One Philox4x32-10 block: 4 random 32-bit words for a 128-bit counter and a 64-bit key.
std::array<uint32_t, 4> philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t key);

class Generator {
 public:
  explicit Generator(uint64_t seed = 0, uint64_t offset = 0) : seed_(seed), offset_(offset) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves n counters and returns the first. Callers use counters [first, first + n).
  uint64_t take(uint64_t n) {
    uint64_t first = offset_;
    offset_ += n;
    return first;
  }
  // Element i of a stream that starts at counter `first`: uniform in [0,1).
  static float uniform_at(uint64_t seed, uint64_t first, uint64_t i);
  // Element i of a stream of standard normals (Box-Muller on one Philox block per element).
  static float normal_at(uint64_t seed, uint64_t first, uint64_t i);

 private:
  uint64_t seed_;
  uint64_t offset_;
};

}  // namespace ada
