// Host memory for tensors: a caching allocator (core/block_cache.h) over 64-byte aligned malloc.
// Blocks from 64 KiB up are kept when freed and reused by later tensors of about the same size,
// so a training step in steady state takes no memory from the kernel and gives none back (glibc
// otherwise returns large freed blocks with munmap or heap trimming and page-faults them in again
// on the next step, a cost that varied from run to run by up to a fifth of a ResNet-20 forward
// pass). The cache never holds more than the peak of live tensor bytes, so resident memory stays
// below twice the working set. Smaller blocks go to malloc directly.
//
// ADA_HOST_CACHE=0 in the environment turns the caching off (every block goes back to malloc,
// for memory debuggers); it is off in AddressSanitizer builds, where reuse would hide
// use-after-free. The statistics count every tensor block either way.
#pragma once

#include <cstddef>

#include "core/block_cache.h"

namespace ada::host {

// A 64-byte aligned block of at least `bytes`; throws Error when the host is out of memory.
void* alloc(size_t bytes);
// `block` from alloc(bytes), with the same `bytes`.
void free(void* block, size_t bytes) noexcept;
MemoryStats memory_stats();
void reset_peak();
// Gives the cached blocks back to malloc.
void empty_cache();
// Whether blocks are cached (see above).
bool caching();

}  // namespace ada::host
