// The WAGMA-SGD group schedule (Li et al., TPDS 2021, Algorithm 1), a pure function of (P, S, t):
// at iteration t the group step runs m = log2 S butterfly phases; phase r pairs rank p with
// p XOR 2^((t*m + r) mod k), k = log2 P. The group of p at t is every rank that agrees with p on
// all bits but those m, so there are P/S disjoint groups of S ranks. The bit sets repeat every
// k / gcd(k, m) iterations, and log_S P consecutive group averages (no local updates between)
// equal the global average. Every `global_every`-th iteration ((t+1) mod tau == 0) is a global
// (world) average instead.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ada::sync {

class WagmaSchedule {
 public:
  // ConfigError unless P and S are powers of two with 1 <= S <= P and global_every >= 1.
  WagmaSchedule(int ranks, int group_size, int64_t global_every = 1 << 30);

  int ranks() const { return p_; }
  int group_size() const { return s_; }
  int64_t global_every() const { return tau_; }
  // The rank bits the group step of iteration t varies (m of them).
  std::vector<int> bits(int64_t t) const;
  // Sorted members of rank's group at iteration t.
  std::vector<int> members(int rank, int64_t t) const;
  // All groups of iteration t, each sorted, ordered by their smallest member.
  std::vector<std::vector<int>> groups(int64_t t) const;
  // Index in [0, set_count()) of the bit set iteration t uses (for per-set communicators).
  int set_index(int64_t t) const;
  int set_count() const;
  // Colour of `rank`'s group under bit set `set` (rank with those bits cleared): MPI split key.
  int color(int rank, int set) const;
  bool is_global(int64_t t) const { return (t + 1) % tau_ == 0; }
  // "{0,1,4,5} {2,3,6,7}" (or "global" for a global iteration when tau is finite).
  std::string describe(int64_t t) const;

 private:
  int p_, s_, k_, m_;
  int64_t tau_;
};

}  // namespace ada::sync
