// Injected load imbalance (train.straggler), so that stragglers can be studied on one machine as
// the WAGMA paper does (two random ranks of 64 delayed 320 ms every step). Every rank computes the
// same schedule from the seed: which ranks are slow at step t and by how much is a pure function
// of (seed, t, rank), so runs are reproducible and every rank knows the others' delays.
//   ranks: [1, 3]          the ranks that may be slow (default: all)
//   count: 2               pick this many of them at random each step (default: all of them)
//   delay_ms: 50           fixed delay, or the mean (uniform, exponential) / median (lognormal)
//   distribution: fixed    fixed | uniform (0..2x) | exponential | lognormal
//   sigma: 1.0             lognormal's shape
//   seed: 1
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/config.h"

namespace ada::trainer {

class Straggler {
 public:
  // From the `straggler` section; ConfigError naming the key for impossible values.
  Straggler(const Config& section, int world_size);
  // Delay of `rank` at `step`, in milliseconds (0 when it is not slow then).
  double delay_ms(int64_t step, int rank) const;
  // Sleeps this rank's delay for `step`.
  void wait(int64_t step, int rank) const;
  std::string describe() const;

 private:
  std::vector<int> ranks_;
  int count_ = 0;
  double delay_ms_ = 0, sigma_ = 1;
  std::string distribution_ = "fixed";
  uint64_t seed_ = 1;
};

}  // namespace ada::trainer
