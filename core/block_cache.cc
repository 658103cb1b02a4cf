#include "core/block_cache.h"

#include <algorithm>

namespace ada {

BlockCache::BlockCache(Policy policy, SystemAlloc sys_alloc, SystemFree sys_free, int context)
    : policy_(policy), sys_alloc_(sys_alloc), sys_free_(sys_free), context_(context) {}

BlockCache::~BlockCache() {
  for (auto& [size, b] : cached_) delete b;
  for (auto& [ptr, b] : live_) delete b;
}

size_t BlockCache::round(size_t bytes) const {
  bytes = std::max<size_t>(bytes, 1);
  const size_t bin = !kept(bytes)             ? 64
                     : bytes <= policy_.small ? policy_.small_bin
                                              : policy_.large_bin;
  return (bytes + bin - 1) / bin * bin;
}

void BlockCache::cache(Block* b) {
  b->free = true;
  b->when = ++clock_;
  b->where = cached_.emplace(b->size, b);
  cached_bytes_ += static_cast<int64_t>(b->size);
}

void BlockCache::uncache(Block* b) {
  cached_.erase(b->where);
  cached_bytes_ -= static_cast<int64_t>(b->size);
  b->free = false;
}

BlockCache::Block* BlockCache::take_cached(size_t size) {
  auto it = cached_.lower_bound(size);  // the smallest free block that is large enough
  if (it == cached_.end()) return nullptr;
  Block* b = it->second;
  const bool small = size <= policy_.small;
  if (b->size == size || (!small && b->size <= size + size / 4)) {  // whole: exact, or within 1.25x
    uncache(b);
    return b;
  }
  if (small || !policy_.split) return nullptr;
  uncache(b);
  if (b->size - size > policy_.small) {  // the front for the request, the rest stays cached
    Block* rest = new Block{b->ptr + size, b->size - size};
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    cache(rest);
  }
  return b;
}

void* BlockCache::alloc(size_t bytes, bool may_release) {
  const size_t size = round(bytes);
  const bool cached_kind = kept(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  Block* b = cached_kind ? take_cached(size) : nullptr;
  void* p = b ? b->ptr : nullptr;
  if (!p) {
    p = sys_alloc_(size, context_);
    if (!p && !cached_.empty() && policy_.release_on_failure && may_release) {
      release_all();
      p = sys_alloc_(size, context_);
    }
    if (!p) return nullptr;
    stats_.reserved += static_cast<int64_t>(size);
    stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
    if (cached_kind) {
      ++stats_.system_allocs;
      b = new Block{static_cast<char*>(p), size};
    }
  }
  if (b) live_[p] = b;
  stats_.allocated += static_cast<int64_t>(b ? b->size : size);
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  high_water_ = std::max(high_water_, stats_.allocated);
  return p;
}

void BlockCache::free(void* block, size_t bytes) noexcept {
  if (!block) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!kept(bytes)) {
    const auto size = static_cast<int64_t>(round(bytes));
    stats_.allocated -= size;
    stats_.reserved -= size;
    sys_free_(block, context_);
    return;
  }
  auto it = live_.find(block);
  if (it == live_.end()) return;  // not ours: nothing sensible to do in a noexcept path
  Block* b = it->second;
  live_.erase(it);
  stats_.allocated -= static_cast<int64_t>(b->size);
  if (Block* p = b->prev; p && p->free) {  // merge with free neighbours of the same segment
    uncache(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    delete b;
    b = p;
  }
  if (Block* n = b->next; n && n->free) {
    uncache(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    delete n;
  }
  if (policy_.cap_at_peak) {
    // (high_water_ >= the block's live part, so the loop ends with room for it unless the cache
    // holds only parts of segments, which cannot go back.)
    while (cached_bytes_ + static_cast<int64_t>(b->size) > high_water_ &&
           release_oldest_segment()) {
    }
  }
  cache(b);
}

void BlockCache::release_segment(Block* b) {
  uncache(b);
  sys_free_(b->ptr, context_);
  stats_.reserved -= static_cast<int64_t>(b->size);
  ++stats_.system_frees;
  delete b;
}

bool BlockCache::release_oldest_segment() {
  Block* oldest = nullptr;
  for (auto& [size, b] : cached_)
    if (!b->prev && !b->next && (!oldest || b->when < oldest->when)) oldest = b;
  if (!oldest) return false;
  release_segment(oldest);
  return true;
}

void BlockCache::release_all() {
  for (auto it = cached_.begin(); it != cached_.end();) {
    Block* b = (it++)->second;  // (release_segment erases b's entry)
    if (!b->prev && !b->next) release_segment(b);
  }
}

bool BlockCache::owns(const void* block) const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.count(const_cast<void*>(block)) > 0;
}

void BlockCache::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  release_all();
}

MemoryStats BlockCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void BlockCache::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

}  // namespace ada
