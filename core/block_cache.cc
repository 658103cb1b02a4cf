#include "core/block_cache.h"

#include <algorithm>

namespace ada {

BlockCache::BlockCache(Policy policy, SystemAlloc sys_alloc, SystemFree sys_free, int context)
    : policy_(policy), sys_alloc_(sys_alloc), sys_free_(sys_free), context_(context) {}

size_t BlockCache::round(size_t bytes) const {
  bytes = std::max<size_t>(bytes, 1);
  const size_t bin = !kept(bytes)            ? 64
                     : bytes <= policy_.small ? policy_.small_bin
                                              : policy_.large_bin;
  return (bytes + bin - 1) / bin * bin;
}

void* BlockCache::alloc(size_t bytes) {
  const size_t size = round(bytes);
  const bool cached_kind = kept(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* p = nullptr;
  size_t got = size;
  if (cached_kind) {
    auto it = cached_.lower_bound(size);
    const size_t limit = size <= policy_.small ? size : size + size / 4;
    if (it != cached_.end() && it->first <= limit) {
      p = it->second.first;
      got = it->first;
      cached_bytes_ -= static_cast<int64_t>(got);
      cached_.erase(it);
    }
  }
  if (!p) {
    p = sys_alloc_(size, context_);
    if (!p && !cached_.empty()) {
      release_all();
      p = sys_alloc_(size, context_);
    }
    if (!p) return nullptr;
    if (cached_kind) ++stats_.system_allocs;
    stats_.reserved += static_cast<int64_t>(size);
    stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  }
  if (cached_kind) live_[p] = got;
  stats_.allocated += static_cast<int64_t>(got);
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
  const size_t size = it->second;
  live_.erase(it);
  stats_.allocated -= static_cast<int64_t>(size);
  if (policy_.cap_at_peak) {
    // (high_water_ >= size: the block was live, so the loop ends with room for it.)
    while (cached_bytes_ + static_cast<int64_t>(size) > high_water_ && !cached_.empty()) {
      auto oldest = cached_.begin();
      for (auto c = cached_.begin(); c != cached_.end(); ++c)
        if (c->second.second < oldest->second.second) oldest = c;
      release_one(oldest);
    }
  }
  cached_.emplace(size, std::make_pair(block, ++clock_));
  cached_bytes_ += static_cast<int64_t>(size);
}

void BlockCache::release_one(std::multimap<size_t, std::pair<void*, uint64_t>>::iterator it) {
  sys_free_(it->second.first, context_);
  stats_.reserved -= static_cast<int64_t>(it->first);
  cached_bytes_ -= static_cast<int64_t>(it->first);
  ++stats_.system_frees;
  cached_.erase(it);
}

void BlockCache::release_all() {
  while (!cached_.empty()) release_one(cached_.begin());
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
