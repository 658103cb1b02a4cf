// DistributedSampler: permutation, sharding by rank, padding, drop_last, resume.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "data/distributed_sampler.h"
#include "data_test_util.h"

namespace ada::data {
namespace {

TEST(Sampler, PermutationIsAPermutationSeededByEpoch) {
  auto p0 = DistributedSampler::permutation(1000, 7, 0);
  auto p0b = DistributedSampler::permutation(1000, 7, 0);
  auto p1 = DistributedSampler::permutation(1000, 7, 1);
  auto q0 = DistributedSampler::permutation(1000, 8, 0);
  EXPECT_EQ(p0, p0b);
  EXPECT_NE(p0, p1);
  EXPECT_NE(p0, q0);
  std::vector<int64_t> s = p0;
  std::sort(s.begin(), s.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(s[i], i);
  // Not the identity, and roughly uniform: element 0 lands in each half about equally often.
  int first_half = 0;
  for (int e = 0; e < 400; ++e) {
    auto p = DistributedSampler::permutation(10, 3, e);
    first_half += std::find(p.begin(), p.end(), 0) - p.begin() < 5;
  }
  EXPECT_GT(first_half, 160);
  EXPECT_LT(first_half, 240);
}

TEST(Sampler, PinnedPermutation) {
  // Pins the shuffle so that a change of the algorithm (which would change every run's data
  // order and break resuming old checkpoints) is noticed.
  auto p = DistributedSampler::permutation(10, 42, 3);
  static const std::vector<int64_t> kFrozen = {4, 3, 1, 5, 9, 0, 8, 6, 7, 2};
  EXPECT_EQ(p, kFrozen);
}

TEST(Sampler, ShardsAreDisjointAndCoverWithPadding) {
  const int64_t n = 10;
  const int world = 4;  // 10 does not divide: pad to 12 by repeating the first two
  auto perm = DistributedSampler::permutation(n, 5, 2);
  std::multiset<int64_t> seen;
  for (int r = 0; r < world; ++r) {
    DistributedSampler s(n, {r, world, 5, true, false});
    s.set_epoch(2);
    ASSERT_EQ(s.samples_per_rank(), 3);
    const auto& idx = s.epoch_indices();
    ASSERT_EQ(idx.size(), 3u);
    for (int64_t k = 0; k < 3; ++k) {
      int64_t pos = r + k * world;  // rank r takes positions r, r + P, ...
      int64_t expect = pos < n ? perm[pos] : perm[pos - n];
      EXPECT_EQ(idx[k], expect) << "rank " << r << " k " << k;
      seen.insert(idx[k]);
    }
  }
  EXPECT_EQ(seen.size(), 12u);
  for (int64_t i = 0; i < n; ++i) EXPECT_GE(seen.count(i), 1u);
  EXPECT_EQ(seen.count(perm[0]), 2u);
  EXPECT_EQ(seen.count(perm[1]), 2u);
}

TEST(Sampler, DropLastCutsTheTail) {
  const int64_t n = 10;
  auto perm = DistributedSampler::permutation(n, 5, 0);
  std::set<int64_t> seen;
  for (int r = 0; r < 4; ++r) {
    DistributedSampler s(n, {r, 4, 5, true, true});
    ASSERT_EQ(s.samples_per_rank(), 2);
    for (int64_t k = 0; k < 2; ++k) EXPECT_EQ(s.epoch_indices()[k], perm[r + 4 * k]);
    seen.insert(s.epoch_indices().begin(), s.epoch_indices().end());
  }
  EXPECT_EQ(seen.size(), 8u);  // perm[8], perm[9] dropped
  EXPECT_FALSE(seen.count(perm[8]));
  EXPECT_FALSE(seen.count(perm[9]));
}

TEST(Sampler, PadsSeveralTimesWhenWorldExceedsSize) {
  // 3 examples, 8 ranks: every rank still gets one.
  for (int r = 0; r < 8; ++r) {
    DistributedSampler s(3, {r, 8, 0, false, false});
    ASSERT_EQ(s.samples_per_rank(), 1);
    EXPECT_EQ(s.epoch_indices()[0], r % 3);
  }
  testing::expect_error<ConfigError>(
      [] {
        DistributedSampler(3, {0, 8, 0, false, true});
      },
      {"drop_last", "3 examples", "8 ranks"});
}

TEST(Sampler, NoShuffleIsIdentityStridedByRank) {
  DistributedSampler s(7, {1, 2, 99, false, false});
  EXPECT_EQ(s.epoch_indices(), (std::vector<int64_t>{1, 3, 5, 0}));
}

TEST(Sampler, NextAndResume) {
  DistributedSampler a(100, {1, 3, 11, true, false});
  a.set_epoch(4);
  auto all = a.epoch_indices();
  auto b1 = a.next(10);
  auto b2 = a.next(10);
  SamplerState st = a.state();
  EXPECT_EQ(st.epoch, 4);
  EXPECT_EQ(st.position, 20);
  DistributedSampler b(100, {1, 3, 11, true, false});
  b.restore(st);
  auto rest_b = b.next(1000);
  auto rest_a = a.next(1000);
  EXPECT_EQ(rest_a, rest_b);
  EXPECT_EQ(rest_a.size(), 34u - 20u);
  std::vector<int64_t> joined = b1;
  joined.insert(joined.end(), b2.begin(), b2.end());
  joined.insert(joined.end(), rest_a.begin(), rest_a.end());
  EXPECT_EQ(joined, all);
  EXPECT_TRUE(a.next(5).empty());
  testing::expect_error<ConfigError>([&] { b.restore({4, 35}); }, {"position 35", "34 examples"});
  // set_epoch starts the epoch from its first place, also the epoch it is in.
  b.set_epoch(4);
  EXPECT_EQ(b.state().position, 0);
  EXPECT_EQ(b.next(1000), all);
}

// What a resume on another number of ranks relies on (apps/trainer/checkpoint.cc,
// loader_position): after p examples on each of `world` ranks, the ranks together have read the
// epoch permutation's first p x world places, so on w ranks each continues at p x world / w.
TEST(Sampler, TheRanksTogetherReadTheEpochsFirstPlacesWhateverTheWorldSize) {
  constexpr int64_t n = 1003;  // not a multiple of any world below (drop_last cuts differ)
  const auto perm = DistributedSampler::permutation(n, 7, 2);
  for (const int world : {1, 2, 3, 4, 6, 8}) {
    for (const int64_t p : {int64_t{0}, int64_t{5}, int64_t{40}, n / 8}) {  // n / 8 = 125
      std::multiset<int64_t> read;
      for (int r = 0; r < world; ++r) {
        DistributedSampler s(n, {r, world, 7, true, true});
        s.set_epoch(2);
        if (p > 0)
          for (int64_t i : s.next(p)) read.insert(i);
      }
      EXPECT_EQ(read, std::multiset<int64_t>(perm.begin(), perm.begin() + p * world))
          << world << " ranks, " << p << " each";
    }
  }
}

TEST(Sampler, BadArguments) {
  testing::expect_error<ConfigError>([] { DistributedSampler(10, {2, 2}); }, {"rank 2"});
  testing::expect_error<ConfigError>([] { DistributedSampler(10, {0, 0}); }, {"world size 0"});
}

}  // namespace
}  // namespace ada::data
