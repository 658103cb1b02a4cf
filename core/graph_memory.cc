#include "core/graph_memory.h"

#include "base/error.h"

namespace ada {

struct GraphMemory::Pool {
  static BlockCache::Policy policy() {
    BlockCache::Policy p;
    p.release_on_failure = false;  // its cached blocks are the replays' memory
    return p;
  }
  Pool(BlockCache::SystemAlloc a, BlockCache::SystemFree f, int context)
      : blocks(policy(), a, f, context) {}
  BlockCache blocks;
  // Blocks freed during this pool's capture that its kernels still read: the device pool's, and
  // other graphs' pools' (with their pool, kept alive here: their blocks are still allocated).
  std::vector<std::pair<void*, size_t>> adopted;
  std::vector<std::tuple<std::shared_ptr<Pool>, void*, size_t>> adopted_from_graphs;
  std::vector<void*> pinned;
  bool retired = false;
};

GraphMemory::GraphMemory(BlockCache::SystemAlloc sys_alloc, BlockCache::SystemFree sys_free,
                         int context, FreePinned free_pinned)
    : device_(BlockCache::Policy{}, sys_alloc, sys_free, context),
      sys_alloc_(sys_alloc),
      sys_free_(sys_free),
      context_(context),
      free_pinned_(free_pinned) {}

bool GraphMemory::capturing_here() const {
  return capturing() &&
         capture_thread_.load(std::memory_order_acquire) == std::this_thread::get_id();
}

void* GraphMemory::alloc(size_t bytes) {
  if (capturing_here()) return capture_->blocks.alloc(bytes);
  // Another thread's capture: out of memory, the device pool may not give its cache back.
  return device_.alloc(bytes, !capturing());
}

void GraphMemory::free(void* block, size_t bytes) noexcept {
  if (!block) return;
  if (npools_.load(std::memory_order_acquire) > 0 && free_in_graph_pool(block, bytes)) return;
  if (capturing_here() && device_.owns(block)) {  // the captured kernels still use it
    std::lock_guard<std::mutex> lock(mu_);
    capture_->adopted.emplace_back(block, bytes);
    return;
  }
  device_.free(block, bytes);
}

bool GraphMemory::free_in_graph_pool(void* block, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& pool : pools_) {
    if (!pool->blocks.owns(block)) continue;
    if (capturing_here() && pool.get() != capture_) {
      capture_->adopted_from_graphs.emplace_back(pool, block, bytes);
      return true;
    }
    pool->blocks.free(block, bytes);
    if (pool->retired) sweep();
    return true;
  }
  return false;
}

void GraphMemory::sweep() {
  if (capturing()) return;
  for (auto it = pools_.begin(); it != pools_.end();) {
    Pool& pool = **it;
    if (pool.retired) {
      pool.blocks.release_cached();
      for (void* h : pool.pinned) free_pinned_(h);
      pool.pinned.clear();
    }
    if (pool.retired && pool.blocks.stats().allocated == 0) {
      it = pools_.erase(it);
      npools_.fetch_sub(1, std::memory_order_release);
    } else {
      ++it;
    }
  }
}

std::shared_ptr<GraphMemory::Pool> GraphMemory::open_capture() {
  auto pool = std::make_shared<Pool>(sys_alloc_, sys_free_, context_);
  std::lock_guard<std::mutex> lock(mu_);
  if (capture_ || capturing()) return nullptr;
  pools_.push_back(pool);
  npools_.fetch_add(1, std::memory_order_release);
  capture_ = pool.get();
  capture_thread_.store(std::this_thread::get_id(), std::memory_order_release);
  return pool;
}

void GraphMemory::capture_began() {
  capturing_.store(true, std::memory_order_release);
}

void GraphMemory::close_capture() {
  capturing_.store(false, std::memory_order_release);
  std::lock_guard<std::mutex> lock(mu_);
  capture_ = nullptr;
  capture_thread_.store(std::thread::id(), std::memory_order_release);
}

void GraphMemory::sweep_retired() {
  std::lock_guard<std::mutex> lock(mu_);
  sweep();
}

void GraphMemory::retire(const std::shared_ptr<Pool>& pool) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [block, bytes] : pool->adopted) device_.free(block, bytes);
  pool->adopted.clear();
  for (const auto& [owner, block, bytes] : pool->adopted_from_graphs)
    owner->blocks.free(block, bytes);
  pool->adopted_from_graphs.clear();
  pool->retired = true;
  sweep();
}

void GraphMemory::keep(void* host) {
  ADA_CHECK(capturing_here()) << "GraphMemory::keep: this thread is not capturing a graph";
  std::lock_guard<std::mutex> lock(mu_);
  capture_->pinned.push_back(host);
}

MemoryStats GraphMemory::stats() const {
  MemoryStats m = device_.stats();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& pool : pools_) {
    const MemoryStats g = pool->blocks.stats();
    m.allocated += g.allocated;
    m.peak_allocated += g.peak_allocated;
    m.reserved += g.reserved;
    m.peak_reserved += g.peak_reserved;
    m.system_allocs += g.system_allocs;
    m.system_frees += g.system_frees;
  }
  return m;
}

void GraphMemory::reset_peak() {
  device_.reset_peak();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& pool : pools_) pool->blocks.reset_peak();
}

int64_t GraphMemory::reserved(const Pool& pool) {
  return pool.blocks.stats().reserved;
}

}  // namespace ada
