// Host memory for tensors: a caching allocator (core/block_cache.h) over 64-byte aligned malloc.
// Blocks from 64 KiB up are kept when freed and reused by later tensors of about the same size;
// blocks over 1 MiB may be split for a smaller request and merge again when freed (without that,
// ResNet-50 b32 held 3.5 GB for 2.9 GB of live tensors, with it 3.0 GB). So a training step in
// steady state takes almost nothing from the kernel and gives nothing back (glibc otherwise
// returns large freed blocks with munmap or heap trimming and page-faults them in again on the
// next step, a cost that varied from run to run by up to a fifth of a ResNet-20 forward pass).
// While the cache holds more than the peak of live tensor bytes it gives whole free blocks back
// to malloc, oldest first, so resident memory stays near twice the working set at most. Smaller
// blocks go to malloc directly.
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
