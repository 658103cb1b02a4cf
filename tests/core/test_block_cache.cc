// The caching allocator's policy (core/block_cache.h) against a counting fake system allocator,
// and host memory in steady state: a repeated autograd step takes nothing new from malloc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <vector>

#include "core/autograd.h"
#include "core/block_cache.h"
#include "core/functional.h"
#include "core/host_memory.h"
#include "core/random.h"

namespace ada {
namespace {

struct FakeSystem {
  int64_t budget = INT64_MAX;    // bytes it may still hand out
  std::map<void*, size_t> live;  // block -> bytes; freeing gives the bytes back to the budget
};
FakeSystem g_sys;

void* fake_alloc(size_t bytes, int context) {
  EXPECT_EQ(context, 7);
  if (static_cast<int64_t>(bytes) > g_sys.budget) return nullptr;
  g_sys.budget -= static_cast<int64_t>(bytes);
  void* p = std::malloc(bytes);
  g_sys.live[p] = bytes;
  return p;
}
void fake_free(void* p, int) {
  auto it = g_sys.live.find(p);
  ASSERT_NE(it, g_sys.live.end()) << "freed twice or never allocated";
  g_sys.budget += static_cast<int64_t>(it->second);
  g_sys.live.erase(it);
  std::free(p);
}

BlockCache::Policy policy(bool cap = false) {
  BlockCache::Policy p;
  p.bypass = 1024;
  p.small = 64 << 10;
  p.small_bin = 512;
  p.large_bin = 4096;
  p.cap_at_peak = cap;
  return p;
}

class BlockCacheTest : public ::testing::Test {
 protected:
  void SetUp() override { g_sys = FakeSystem{}; }
  void TearDown() override {
    EXPECT_TRUE(g_sys.live.empty()) << g_sys.live.size() << " blocks leaked";
  }
};

TEST_F(BlockCacheTest, RoundsToBins) {
  BlockCache c(policy(), fake_alloc, fake_free, 7);
  EXPECT_EQ(c.round(0), 64u);
  EXPECT_EQ(c.round(100), 128u);    // bypassed: 64-byte multiples
  EXPECT_EQ(c.round(1024), 1024u);  // small bins of 512
  EXPECT_EQ(c.round(1025), 1536u);
  EXPECT_EQ(c.round(65536), 65536u);
  EXPECT_EQ(c.round(65537), 65536u + 4096u);  // large bins of 4096
}

TEST_F(BlockCacheTest, ReusesAFreedBlockOfTheSameBin) {
  BlockCache c(policy(), fake_alloc, fake_free, 7);
  void* a = c.alloc(3000);
  c.free(a, 3000);
  void* b = c.alloc(2600);  // same 3072-byte bin
  EXPECT_EQ(a, b);
  EXPECT_EQ(c.stats().system_allocs, 1);
  void* d = c.alloc(2000);  // a smaller bin: small blocks are reused only at their own size
  EXPECT_NE(d, b);
  EXPECT_EQ(c.stats().system_allocs, 2);
  c.free(b, 2600);
  c.free(d, 2000);
  c.release_cached();
  EXPECT_EQ(c.stats().reserved, 0);
  EXPECT_EQ(c.stats().system_frees, 2);
}

// owns(): live blocks of this cache only (the CUDA allocator routes a freed block to the pool,
// a CUDA graph's or the device's, that handed it out).
TEST_F(BlockCacheTest, OwnsItsLiveBlocksOnly) {
  BlockCache c(policy(), fake_alloc, fake_free, 7), other(policy(), fake_alloc, fake_free, 7);
  void* a = c.alloc(3000);
  void* b = other.alloc(3000);
  EXPECT_TRUE(c.owns(a));
  EXPECT_FALSE(c.owns(b));
  EXPECT_TRUE(other.owns(b));
  int on_stack = 0;
  EXPECT_FALSE(c.owns(&on_stack));
  c.free(a, 3000);
  EXPECT_FALSE(c.owns(a));  // cached, no longer live
  void* again = c.alloc(3000);
  EXPECT_EQ(again, a);
  EXPECT_TRUE(c.owns(again));
  c.free(again, 3000);
  other.free(b, 3000);
  c.release_cached();
  other.release_cached();
}

TEST_F(BlockCacheTest, LargeBlocksAreReusedUpToAQuarterBigger) {
  BlockCache c(policy(), fake_alloc, fake_free, 7);
  void* big = c.alloc(100 * 4096);
  c.free(big, 100 * 4096);
  void* fits = c.alloc(81 * 4096);  // 100 <= 81 * 1.25
  EXPECT_EQ(fits, big);
  c.free(fits, 81 * 4096);
  EXPECT_EQ(c.stats().allocated, 0);
  void* too_small = c.alloc(79 * 4096);  // 100 > 79 * 1.25: a new block
  EXPECT_NE(too_small, big);
  EXPECT_EQ(c.stats().system_allocs, 2);
  EXPECT_EQ(c.stats().allocated, 79 * 4096);
  EXPECT_EQ(c.stats().reserved, 179 * 4096);
  c.free(too_small, 79 * 4096);
  c.release_cached();
}

TEST_F(BlockCacheTest, SmallRequestsBypassTheCache) {
  BlockCache c(policy(), fake_alloc, fake_free, 7);
  for (int i = 0; i < 3; ++i) c.free(c.alloc(100), 100);
  const MemoryStats s = c.stats();
  EXPECT_EQ(s.system_allocs, 0);  // counted only for the blocks the cache keeps
  EXPECT_EQ(s.system_frees, 0);
  EXPECT_EQ(g_sys.live.size(), 0u);
  EXPECT_EQ(s.allocated, 0);
  EXPECT_EQ(s.reserved, 0);
  EXPECT_EQ(s.peak_allocated, 128);
}

TEST_F(BlockCacheTest, OutOfMemoryReleasesTheCacheAndRetries) {
  BlockCache c(policy(), fake_alloc, fake_free, 7);
  g_sys.budget = 10 * 4096 * 20;
  std::vector<void*> held;
  for (int i = 0; i < 20; ++i) held.push_back(c.alloc(10 * 4096));
  for (void* p : held) c.free(p, 10 * 4096);  // all cached; the system has nothing left
  EXPECT_EQ(g_sys.budget, 0);
  void* p = c.alloc(30 * 4096);  // no cached block fits: release them all, then succeed
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(c.stats().reserved, 30 * 4096);
  EXPECT_EQ(c.alloc(200 * 4096), nullptr);  // more than the system has  // genuinely out of memory
  EXPECT_EQ(c.stats().allocated, 30 * 4096);
  c.free(p, 30 * 4096);
  c.release_cached();
}

// A CUDA graph's pool (release_on_failure false): its cached blocks are memory the graph's
// replays use, so an allocation the system cannot serve fails and the cache stays whole.
TEST_F(BlockCacheTest, WithoutReleaseOnFailureTheCacheIsKept) {
  BlockCache::Policy keep = policy();
  keep.release_on_failure = false;
  BlockCache c(keep, fake_alloc, fake_free, 7);
  g_sys.budget = 10 * 4096 * 4;
  std::vector<void*> held;
  for (int i = 0; i < 4; ++i) held.push_back(c.alloc(10 * 4096));
  for (void* p : held) c.free(p, 10 * 4096);
  EXPECT_EQ(c.alloc(30 * 4096), nullptr);  // would fit after a release; none is made
  EXPECT_EQ(c.stats().reserved, 4 * 10 * 4096);
  EXPECT_EQ(c.stats().system_frees, 0);
  void* again = c.alloc(10 * 4096);  // the cached blocks still serve their own size
  EXPECT_NE(std::find(held.begin(), held.end(), again), held.end());
  c.free(again, 10 * 4096);
  c.release_cached();
}

TEST_F(BlockCacheTest, CapAtPeakEvictsTheOldestCachedBlocks) {
  BlockCache c(policy(/*cap=*/true), fake_alloc, fake_free, 7);
  void* a = c.alloc(40 * 4096);
  void* b = c.alloc(40 * 4096);
  c.free(a, 40 * 4096);
  c.free(b, 40 * 4096);  // peak live 80 pages: both fit in the cache
  EXPECT_EQ(c.stats().reserved, 80 * 4096);
  // A different size now: live 20 + 20 pages; each free must leave cached <= 80 pages.
  void* x = c.alloc(20 * 4096);  // 40 > 25: not reused
  void* y = c.alloc(20 * 4096);
  c.free(x, 20 * 4096);  // cached 80 + 20 > 80: the oldest (a) goes back
  EXPECT_EQ(g_sys.live.count(a), 0u);
  EXPECT_EQ(g_sys.live.count(b), 1u);
  c.free(y, 20 * 4096);  // 40 + 20 + 20 <= 80
  EXPECT_EQ(c.stats().reserved, 80 * 4096);
  EXPECT_EQ(c.stats().system_frees, 1);
  EXPECT_EQ(c.alloc(40 * 4096), b);  // the survivor is still reused
  c.free(b, 40 * 4096);
  c.release_cached();
}

TEST_F(BlockCacheTest, UnknownPointersAreIgnored) {
  BlockCache c(policy(), fake_alloc, fake_free, 7);
  int local = 0;
  c.free(&local, 1 << 20);
  c.free(nullptr, 1 << 20);
  EXPECT_EQ(c.stats().system_frees, 0);
}

// Splitting (policy: small = 16 pages of 4096 bytes, large bins of one page).
BlockCache::Policy split_policy(bool cap = false) {
  BlockCache::Policy p = policy(cap);
  p.split = true;
  return p;
}
constexpr size_t kPage = 4096;

TEST_F(BlockCacheTest, SplitTakesTheFrontOfALargerBlockAndMergesItBack) {
  BlockCache c(split_policy(), fake_alloc, fake_free, 7);
  void* big = c.alloc(100 * kPage);
  c.free(big, 100 * kPage);
  char* a =
      static_cast<char*>(c.alloc(30 * kPage));  // 100 > 30 * 1.25: split, 70 pages stay cached
  EXPECT_EQ(a, big);
  char* b = static_cast<char*>(c.alloc(30 * kPage));  // the front of the 70-page rest
  EXPECT_EQ(b, a + 30 * kPage);
  char* d = static_cast<char*>(c.alloc(40 * kPage));  // the last 40 pages, whole (40 <= 40 * 1.25)
  EXPECT_EQ(d, b + 30 * kPage);
  EXPECT_EQ(c.stats().system_allocs, 1);
  EXPECT_EQ(c.stats().allocated, static_cast<int64_t>(100 * kPage));
  EXPECT_EQ(c.stats().reserved, static_cast<int64_t>(100 * kPage));
  c.free(a, 30 * kPage);
  c.free(d, 40 * kPage);  // b is live between them: two free blocks of 30 and 40 pages
  void* second = c.alloc(100 * kPage);  // so 100 pages need a new segment
  EXPECT_EQ(c.stats().system_allocs, 2);
  c.free(b, 30 * kPage);                // a + b + d merge back into the whole first segment
  EXPECT_EQ(c.alloc(90 * kPage), big);  // reused whole (100 <= 90 * 1.25)
  EXPECT_EQ(c.stats().system_allocs, 2);
  c.free(big, 90 * kPage);
  c.release_cached();  // the first segment is whole and free: it goes back; the second is live
  EXPECT_EQ(c.stats().system_frees, 1);
  EXPECT_EQ(c.stats().reserved, static_cast<int64_t>(100 * kPage));
  c.free(second, 100 * kPage);
  c.release_cached();
  EXPECT_EQ(c.stats().reserved, 0);
}

TEST_F(BlockCacheTest, SplitLeavesNoRemainderOfSmallSize) {
  BlockCache c(split_policy(), fake_alloc, fake_free, 7);
  void* big = c.alloc(40 * kPage);
  c.free(big, 40 * kPage);
  void* a = c.alloc(30 * kPage);  // 40 > 37.5 but the 10 pages left would be a small block: whole
  EXPECT_EQ(a, big);
  EXPECT_EQ(c.stats().allocated, static_cast<int64_t>(40 * kPage));
  void* s = c.alloc(10 * kPage);  // small requests never split a block
  EXPECT_NE(s, static_cast<char*>(big) + 30 * kPage);
  EXPECT_EQ(c.stats().system_allocs, 2);
  c.free(a, 30 * kPage);
  c.free(s, 10 * kPage);
  c.release_cached();
  EXPECT_EQ(c.stats().reserved, 0);
}

TEST_F(BlockCacheTest, SplitCapAndOutOfMemoryReleaseOnlyWholeSegments) {
  BlockCache c(split_policy(/*cap=*/true), fake_alloc, fake_free, 7);
  g_sys.budget = 200 * kPage;
  void* big = c.alloc(100 * kPage);
  c.free(big, 100 * kPage);
  void* a = c.alloc(30 * kPage);  // split: 70 pages of a live segment cached
  void* x = c.alloc(80 * kPage);  // a second segment; the live peak is now 110 pages
  c.free(x, 80 * kPage);          // cached 70 + 80 > 110, but the 70 are part of a live segment
  EXPECT_EQ(c.stats().system_frees, 0);
  EXPECT_EQ(c.stats().reserved, static_cast<int64_t>(180 * kPage));
  // 90 pages: nothing cached fits and the system has 20 left; the whole segment x goes back, the
  // 70 pages cannot, then the request succeeds.
  void* y = c.alloc(90 * kPage);
  ASSERT_NE(y, nullptr);
  EXPECT_EQ(g_sys.live.count(big), 1u);
  EXPECT_EQ(c.stats().system_frees,
            1);  // x's segment (the fake system may hand its address out again)
  EXPECT_EQ(c.stats().reserved, static_cast<int64_t>(190 * kPage));
  c.free(a, 30 * kPage);  // merges into the whole first segment: cached 100 <= the peak of 120
  EXPECT_EQ(c.stats().system_frees, 1);
  c.free(y, 90 * kPage);  // 100 + 90 > 120: the oldest whole segment (the first) goes back
  EXPECT_EQ(g_sys.live.count(big), 0u);
  EXPECT_EQ(c.stats().system_frees, 2);
  EXPECT_EQ(c.alloc(90 * kPage), y);
  c.free(y, 90 * kPage);
  c.release_cached();
  EXPECT_EQ(c.stats().reserved, 0);
}

// One small conv net step, forward and backward, on the host.
void conv_step(const Tensor& x, const Variable& w1, const Variable& w2) {
  ops::Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  Variable h = fn::relu(fn::conv2d(Variable(x), w1, p));
  Variable y = fn::conv2d(h, w2, p);
  backward(fn::mean(fn::mul(y, y), {0, 1, 2, 3}));
}

TEST(HostMemory, SteadyStateStepsTakeNothingFromMalloc) {
  Generator gen(3);
  const Tensor x = Tensor::randn({16, 8, 32, 32}, gen);  // 512 KiB and up: cached sizes
  Variable w1(Tensor::randn({16, 8, 3, 3}, gen), true),
      w2(Tensor::randn({16, 16, 3, 3}, gen), true);
  conv_step(x, w1, w2);
  conv_step(x, w1, w2);
  const MemoryStats before = host::memory_stats();
  for (int i = 0; i < 3; ++i) {
    w1.zero_grad();
    w2.zero_grad();
    conv_step(x, w1, w2);
  }
  const MemoryStats after = host::memory_stats();
  // (Blocks below 64 KiB come from malloc every time; system_allocs counts only the cached kind.)
  EXPECT_EQ(after.system_allocs, before.system_allocs)
      << "a steady-state step took new blocks from malloc";
  EXPECT_EQ(after.reserved, before.reserved);
  if (!host::caching()) {  // ADA_HOST_CACHE=0 or AddressSanitizer: plain malloc, nothing kept
    EXPECT_EQ(after.system_allocs, 0);
    EXPECT_EQ(after.reserved, after.allocated);
  }
  EXPECT_GT(after.peak_allocated, int64_t{4} << 20)
      << "the step should hold several MiB at its peak";
  EXPECT_LE(after.reserved, 2 * after.peak_allocated + (int64_t{4} << 20));
}

}  // namespace
}  // namespace ada
