// The memory bookkeeping of one device's CUDA graphs (backend/cuda/runtime.cc), host code with
// the system allocator passed in, so that the rules below run under test on any machine
// (tests/core/test_graph_memory.cc) and not only on a GPU.
//
// A device has its pool (a BlockCache over cudaMalloc) and each graph its own (Pool). While a
// thread captures a graph (open_capture .. close_capture), that thread's allocations come from
// the graph's pool: a replay writes them again, so nothing else may ever take them. A block
// freed during the capture is still read by the captured kernels:
//   - the device pool's is adopted by the capture's pool and goes back to the device pool only
//     when the graph is retired (the graph destroyed, or its capture abandoned);
//   - another graph's pool's is held likewise until the capturing graph is retired (freed into
//     its own pool at once, that pool's retirement could give it to the driver under the
//     capturing graph's kernels);
//   - its own pool's is cached there and handed out again within the capture (the capture's
//     stream order makes that safe).
// A retired pool gives its cached blocks back to the driver, and each live block when it is
// freed; it is forgotten once it holds none. Pinned host buffers a graph's copies read (keep) are
// freed with `free_pinned` when it is retired. None of this while a capture runs (giving memory
// back waits for the device, which a capture forbids): the next sweep does it (sweep_retired
// after the capture, or a later retirement or free); nor does the device pool give its cache
// back to retry an allocation that ran out of memory then.
//
// Thread safety: alloc, free, stats and reset_peak from any thread; open_capture,
// capture_began, keep and close_capture from the capturing thread, which must be the only one
// queuing work on the device while it captures.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "core/block_cache.h"

namespace ada {

class GraphMemory {
 public:
  struct Pool;  // one graph's memory

  using FreePinned = void (*)(void* host);
  GraphMemory(BlockCache::SystemAlloc sys_alloc, BlockCache::SystemFree sys_free, int context,
              FreePinned free_pinned);
  GraphMemory(const GraphMemory&) = delete;
  GraphMemory& operator=(const GraphMemory&) = delete;

  // A block of at least `bytes` from the capture's pool when the calling thread captures, else
  // from the device pool; nullptr when the system allocator has none.
  void* alloc(size_t bytes);
  // `block` from alloc(bytes), with the same `bytes`; nullptr is ignored. See above.
  void free(void* block, size_t bytes) noexcept;
  // The size a request of `bytes` is rounded to.
  size_t round(size_t bytes) const { return device_.round(bytes); }

  // A new graph's pool, the calling thread capturing into it from now on; nullptr when a capture
  // is open already (one at a time per device).
  std::shared_ptr<Pool> open_capture();
  // The device's stream capture has begun: capturing() is true from here to close_capture.
  void capture_began();
  // Ends the open capture (whether it began or not), once the device's stream capture has ended
  // (until then other threads' frees must still wait); then sweep_retired() does what frees
  // during the capture left to do.
  void close_capture();
  void sweep_retired();
  // The graph of `pool` is gone: see above.
  void retire(const std::shared_ptr<Pool>& pool);
  // Keeps the pinned host buffer `host` until the capturing graph is retired. Only while the
  // calling thread captures (an internal error otherwise).
  void keep(void* host);

  // Whether a stream capture runs on the device (any thread's), and whether this thread's.
  bool capturing() const { return capturing_.load(std::memory_order_acquire); }
  bool capturing_here() const;

  // The device pool's figures plus every graph pool's (the peaks added up: an upper bound of the
  // peak of the sum).
  MemoryStats stats() const;
  void reset_peak();
  // The device pool's cached blocks back to the system allocator.
  void release_cached() { device_.release_cached(); }
  // Bytes the pool holds from the system allocator, live or cached.
  static int64_t reserved(const Pool& pool);

 private:
  bool free_in_graph_pool(void* block, size_t bytes);
  void sweep();  // mu_ held

  BlockCache device_;
  const BlockCache::SystemAlloc sys_alloc_;
  const BlockCache::SystemFree sys_free_;
  const int context_;
  const FreePinned free_pinned_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Pool>> pools_;  // existing graphs' pools, and retired ones not empty
  std::atomic<int> npools_{0};
  std::atomic<bool> capturing_{false};
  Pool* capture_ = nullptr;  // the open capture's pool (changed only by its thread)
  std::atomic<std::thread::id> capture_thread_{};  // read by every thread's alloc and free
};

}  // namespace ada
