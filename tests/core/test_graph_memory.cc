// The memory rules of CUDA graphs (core/graph_memory.h) against a fake system allocator that
// records what is given back to it (the "driver"): host code, so they run on every machine; the
// CUDA allocator (backend/cuda/runtime.cc) is this class over cudaMalloc.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "base/error.h"
#include "core/graph_memory.h"

namespace ada {
namespace {

struct FakeDriver {
  std::map<void*, size_t> live;  // blocks handed out and not given back
  std::vector<void*> freed;      // blocks given back, in order
  std::vector<void*> pinned_freed;
  bool out_of_memory = false;  // every allocation fails
  // The memory under test: as CUDA's do, frees (which wait for the device) fail during its capture.
  const GraphMemory* memory = nullptr;
};
FakeDriver g_driver;

void* fake_alloc(size_t bytes, int context) {
  EXPECT_EQ(context, 3);
  if (g_driver.out_of_memory) return nullptr;
  void* p = std::malloc(bytes);
  g_driver.live[p] = bytes;
  return p;
}
void fake_free(void* p, int) {
  EXPECT_FALSE(g_driver.memory && g_driver.memory->capturing())
      << "device memory given back while a capture runs";
  ASSERT_EQ(g_driver.live.erase(p), 1u) << "given back twice, or never handed out";
  g_driver.freed.push_back(p);
  std::free(p);
}
void fake_free_pinned(void* p) {
  EXPECT_FALSE(g_driver.memory && g_driver.memory->capturing())
      << "a pinned buffer freed while a capture runs";
  g_driver.pinned_freed.push_back(p);
}

bool given_back(void* p) {
  for (void* f : g_driver.freed)
    if (f == p) return true;
  return false;
}

constexpr size_t kBig = 4 << 20;  // a large block (2 MiB bins), as activations are

class GraphMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_driver = FakeDriver{};
    g_driver.memory = &m;
  }
  void TearDown() override {
    m.release_cached();
    EXPECT_TRUE(g_driver.live.empty()) << g_driver.live.size() << " blocks never given back";
    g_driver.memory = nullptr;
  }
  // A capture whose stream capture began, run by `work` on this thread, then closed and swept.
  std::shared_ptr<GraphMemory::Pool> capture(const std::function<void()>& work) {
    auto pool = m.open_capture();
    EXPECT_TRUE(pool);
    m.capture_began();
    EXPECT_TRUE(m.capturing() && m.capturing_here());
    work();
    m.close_capture();
    m.sweep_retired();
    EXPECT_FALSE(m.capturing());
    return pool;
  }
  GraphMemory m{fake_alloc, fake_free, 3, fake_free_pinned};
};

TEST_F(GraphMemoryTest, ACapturesBlocksAreItsOwnAndNeverHandedOutEagerly) {
  void* a = nullptr;
  auto pool = capture([&] {
    a = m.alloc(kBig);
    m.free(a, kBig);
    EXPECT_EQ(m.alloc(kBig), a) << "within the capture its pool reuses its own blocks";
  });
  EXPECT_GE(GraphMemory::reserved(*pool), static_cast<int64_t>(kBig));
  void* e = m.alloc(kBig);  // eager: the device pool, not the graph's
  EXPECT_NE(e, a);
  m.free(e, kBig);
  EXPECT_EQ(m.stats().allocated, static_cast<int64_t>(kBig)) << "a live, e cached";
  m.free(a, kBig);  // the graph's output freed eagerly: back to its pool, not to the device's
  void* e2 = m.alloc(kBig);
  EXPECT_NE(e2, a);
  m.free(e2, kBig);
  EXPECT_FALSE(given_back(a));
  m.retire(pool);  // its cached blocks go to the driver
  EXPECT_TRUE(given_back(a));
}

TEST_F(GraphMemoryTest, ADevicePoolBlockFreedInACaptureWaitsForTheGraphsEnd) {
  void* x = m.alloc(kBig);  // an eager tensor the captured kernels read, freed during the capture
  auto pool = capture([&] { m.free(x, kBig); });
  void* e = m.alloc(kBig);
  EXPECT_NE(e, x) << "the graph's replays still read it";
  m.free(e, kBig);
  m.retire(pool);
  EXPECT_FALSE(given_back(x)) << "the device pool's block goes back to the device pool";
  void* again = m.alloc(kBig);
  void* again2 = m.alloc(kBig);
  EXPECT_TRUE(again == x || again2 == x);
  m.free(again, kBig);
  m.free(again2, kBig);
}

// The defect the second review of the blind CUDA code found: graph B's capture freed a block of
// graph A's pool into A's cache, so A's end gave it to the driver under B's kernels.
TEST_F(GraphMemoryTest, AnotherGraphsBlockFreedInACaptureIsKeptUntilThatGraphIsRetired) {
  void* a = nullptr;
  auto pool_a = capture([&] { a = m.alloc(kBig); });  // A's output, live after its capture
  auto pool_b = capture([&] { m.free(a, kBig); });    // B reads it, then frees it
  m.retire(pool_a);
  EXPECT_FALSE(given_back(a)) << "B's replays still read it";
  m.retire(pool_b);
  EXPECT_TRUE(given_back(a)) << "A is gone: its block goes to the driver once B is";
  EXPECT_EQ(m.stats().allocated, 0);
}

TEST_F(GraphMemoryTest, ARetiredPoolGivesBlocksBackOnlyOutsideACapture) {
  void* a = nullptr;
  auto pool_a = capture([&] { a = m.alloc(kBig); });
  m.retire(pool_a);  // a still live: A's pool stays until it is freed
  EXPECT_FALSE(given_back(a));
  auto pool_b = m.open_capture();
  m.capture_began();
  // Another thread frees a while this one captures: giving memory to the driver waits for the
  // device, which a capture forbids, so it waits for the sweep after the capture.
  std::thread([&] {
    EXPECT_FALSE(m.capturing_here());
    m.free(a, kBig);
  }).join();
  EXPECT_FALSE(given_back(a));
  m.close_capture();
  m.sweep_retired();
  EXPECT_TRUE(given_back(a));
  m.retire(pool_b);
}

TEST_F(GraphMemoryTest, OtherThreadsAllocateFromTheDevicePoolDuringACapture) {
  void* e = m.alloc(kBig);
  m.free(e, kBig);  // cached in the device pool
  void* in_capture = nullptr;
  void* other = nullptr;
  auto pool = capture([&] {
    std::thread([&] { other = m.alloc(kBig); }).join();
    in_capture = m.alloc(kBig);
  });
  EXPECT_EQ(other, e);
  EXPECT_NE(in_capture, e);
  m.free(other, kBig);
  m.free(in_capture, kBig);
  m.retire(pool);
}

TEST_F(GraphMemoryTest, OneCaptureAtATimeAndPinnedBuffersFreedWithTheGraph) {
  int host = 0;
  auto pool = m.open_capture();
  ASSERT_TRUE(pool);
  EXPECT_FALSE(m.open_capture()) << "a second capture while one is open";
  m.capture_began();
  m.keep(&host);
  m.close_capture();
  EXPECT_THROW(m.keep(&host), Error) << "outside a capture";
  EXPECT_TRUE(g_driver.pinned_freed.empty());
  m.retire(pool);
  EXPECT_EQ(g_driver.pinned_freed, std::vector<void*>{&host});
  auto again = m.open_capture();  // a capture whose stream capture never began, abandoned
  EXPECT_TRUE(again);
  EXPECT_FALSE(m.capturing());
  m.close_capture();
  m.retire(again);
}

// What a review of the integration found: out of memory, the device pool gave its cache back
// and retried while another thread captured, and a graph retired during a capture freed its
// pinned buffers then; both wait for the device, which a capture forbids.
TEST_F(GraphMemoryTest, NothingGoesBackToTheDriverWhileACaptureRuns) {
  int host = 0;
  auto kept = capture([&] { m.keep(&host); });
  void* e = m.alloc(kBig);
  m.free(e, kBig);  // cached in the device pool
  auto pool = m.open_capture();
  m.capture_began();
  g_driver.out_of_memory = true;
  std::thread([&] {
    EXPECT_EQ(m.alloc(2 * kBig), nullptr) << "out of memory, the cache kept";
    m.retire(kept);  // another thread's graph destroyed during the capture
  }).join();
  g_driver.out_of_memory = false;
  EXPECT_FALSE(given_back(e));
  EXPECT_TRUE(g_driver.pinned_freed.empty());
  m.close_capture();
  m.sweep_retired();
  EXPECT_EQ(g_driver.pinned_freed, std::vector<void*>{&host}) << "freed by the sweep after it";
  g_driver.out_of_memory = true;
  void* big = m.alloc(2 * kBig);
  EXPECT_EQ(big, nullptr) << "no capture: the cache given back, the retry fails too";
  EXPECT_TRUE(given_back(e));
  g_driver.out_of_memory = false;
  m.retire(pool);
}

TEST_F(GraphMemoryTest, StatsAddTheGraphsPoolsToTheDevicePool) {
  void* e = m.alloc(kBig);
  void* a = nullptr;
  auto pool = capture([&] { a = m.alloc(kBig); });
  const MemoryStats s = m.stats();
  EXPECT_EQ(s.allocated, static_cast<int64_t>(2 * kBig));
  EXPECT_EQ(s.peak_allocated, static_cast<int64_t>(2 * kBig));
  m.free(e, kBig);
  m.free(a, kBig);
  m.reset_peak();
  EXPECT_EQ(m.stats().peak_allocated, 0);
  m.retire(pool);
  EXPECT_EQ(m.stats().reserved, static_cast<int64_t>(kBig)) << "only e's block, cached";
}

}  // namespace
}  // namespace ada
