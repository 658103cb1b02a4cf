#include "core/host_memory.h"

#include <cstdint>

#include "base/env.h"
#include "base/error.h"

#if defined(__SANITIZE_ADDRESS__)
#define ADA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ADA_ASAN 1
#endif
#endif

namespace ada::host {
namespace {

void* system_alloc(size_t bytes, int) {
  return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
}
void system_free(void* block, int) {
  std::free(block);
}

bool caching_wanted() {
#ifdef ADA_ASAN
  return false;
#else
  return env_switch("ADA_HOST_CACHE", true,
                    "1 (cache large host blocks, the default) or 0 (plain malloc)");
#endif
}

BlockCache& cache() {
  // Never destroyed: tensors freed during static destruction must still find it.
  static BlockCache* c = [] {
    BlockCache::Policy p;
    p.bypass = caching_wanted() ? size_t{64} << 10 : SIZE_MAX;
    p.small = size_t{1} << 20;
    p.small_bin = size_t{4} << 10;
    p.large_bin = size_t{64} << 10;
    p.cap_at_peak = true;
    p.split = true;
    return new BlockCache(p, system_alloc, system_free, 0);
  }();
  return *c;
}

}  // namespace

void* alloc(size_t bytes) {
  void* p = cache().alloc(bytes);
  if (!p) {
    const MemoryStats s = cache().stats();
    ADA_THROW(Error) << "out of host memory allocating " << bytes << " bytes (live tensors "
                     << s.allocated / (1 << 20) << " MiB); lower the batch size";
  }
  return p;
}

void free(void* block, size_t bytes) noexcept {
  cache().free(block, bytes);
}
MemoryStats memory_stats() {
  return cache().stats();
}
void reset_peak() {
  cache().reset_peak();
}
void empty_cache() {
  cache().release_cached();
}
bool caching() {
  static const bool on = caching_wanted();
  return on;
}

}  // namespace ada::host
