// The bookkeeping of a caching allocator, shared by host memory (core/host_memory.h) and CUDA
// device memory (backend/cuda/runtime.cc): freed blocks are kept by binned size and handed out
// again, so a training step in steady state makes no calls to the system allocator. Thread-safe
// (one mutex). The policy (bins, splitting, merging, the cap at the peak): docs/architecture.md,
// "Memory".
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace ada {

struct MemoryStats {
  int64_t allocated = 0;       // bytes in live blocks (rounded to the allocator's bins)
  int64_t peak_allocated = 0;  // since the start or the last reset_peak
  int64_t reserved = 0;        // bytes held from the system allocator, live or cached
  int64_t peak_reserved = 0;
  // Calls to the system allocator for blocks the cache keeps (not the bypassed small ones), and
  // such blocks given back to it (evictions, releases). In steady state both stay constant.
  int64_t system_allocs = 0;
  int64_t system_frees = 0;
};

class BlockCache {
 public:
  struct Policy {
    size_t bypass = 0;               // requests below this are not cached
    size_t small = size_t{1} << 20;  // up to this: bins of small_bin, exact reuse
    size_t small_bin = 512;
    size_t large_bin = size_t{2} << 20;  // above: bins of large_bin, reused up to 1.25x
    bool cap_at_peak = false;
    bool split = false;  // large blocks may be split and merged back (see above)
    // When the system allocator fails, release the cached blocks and try once more. A CUDA
    // graph's pool says no: its cached blocks are memory its replays still use.
    bool release_on_failure = true;
  };
  // The system allocator: returns nullptr when out of memory (other failures may throw), and its
  // inverse. `context` is passed through (the device index).
  using SystemAlloc = void* (*)(size_t bytes, int context);
  using SystemFree = void (*)(void* block, int context);

  BlockCache(Policy policy, SystemAlloc sys_alloc, SystemFree sys_free, int context);
  ~BlockCache();  // forgets its bookkeeping; gives nothing back (release_cached() does)
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // A block of at least `bytes` (0 counts as 1); nullptr when the system allocator fails even
  // after the cache was released (when the policy and `may_release` allow it: a CUDA graph
  // capture elsewhere on the device forbids giving memory back, which waits for the device).
  void* alloc(size_t bytes, bool may_release = true);
  // `block` from alloc(bytes) with the same `bytes`; nullptr is ignored.
  void free(void* block, size_t bytes) noexcept;
  // Gives every cached block back to the system allocator.
  void release_cached();
  // Whether `block` is a live block this cache handed out (bypassed small blocks excepted): how
  // the CUDA allocator finds which of its pools a freed block belongs to (a CUDA graph's or the
  // device's).
  bool owns(const void* block) const;
  MemoryStats stats() const;
  void reset_peak();
  // The size a request of `bytes` is rounded to.
  size_t round(size_t bytes) const;

 private:
  struct Block;
  using FreeMap = std::multimap<size_t, Block*>;
  // A block handed out or cached. Blocks split from one system allocation are linked in address
  // order; a block with neither neighbour is a whole segment.
  struct Block {
    char* ptr;
    size_t size;
    Block* prev = nullptr;
    Block* next = nullptr;
    bool free = false;
    uint64_t when = 0;          // when it was cached (for the cap's oldest-first order)
    FreeMap::iterator where{};  // its entry in cached_ while free
  };

  bool kept(size_t bytes) const {
    return std::max<size_t>(bytes, 1) >= policy_.bypass;
  }  // not bypassed
  // mu_ held for all of these.
  Block* take_cached(size_t size);  // a cached block for a request of `size`, or nullptr
  void cache(Block* b);
  void uncache(Block* b);
  void release_segment(Block* b);  // b: cached, whole
  bool release_oldest_segment();   // false when no whole segment is cached
  void release_all();

  const Policy policy_;
  const SystemAlloc sys_alloc_;
  const SystemFree sys_free_;
  const int context_;
  mutable std::mutex mu_;
  FreeMap cached_;                          // size -> free block
  std::unordered_map<void*, Block*> live_;  // cached-kind live block -> its Block
  int64_t cached_bytes_ = 0;
  int64_t high_water_ = 0;  // peak of live bytes over the whole run (the cap; reset_peak keeps it)
  uint64_t clock_ = 0;
  MemoryStats stats_;
};

}  // namespace ada
