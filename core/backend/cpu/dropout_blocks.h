// Dropout's multipliers from the Philox stream (core/philox.h: element 4j + w takes word w of
// block `first + j`; the CUDA kernels draw the same stream, so a seed means the same masks on both
// backends), for whole blocks: the CPU dropout ops and the fused attention's dropout call this.
#pragma once

#include <cstdint>

namespace ada::cpu {

// For blocks j0 .. j0 + blocks - 1 of the stream at (seed, first), element i < 4 * blocks (i
// counted from block j0's first word) gets the multiplier m_i = (u_i >= p ? scale : 0), u_i the
// element's uniform in [0, 1). Writes m_i to mask[i] when mask is not null, and y[i] = x[i] * m_i
// when x is not null (then y must not be null). Runs on the calling thread: the AVX-512 kernel
// where cpu::isa() has it, else a loop the compiler vectorises for the baseline; the same bits.
void dropout_blocks(uint64_t seed, uint64_t first, uint64_t j0, int64_t blocks, float p,
                    float scale, const float* x, float* y, float* mask);

namespace dropout_detail {
// The AVX-512 kernel (dropout_avx512.cc), for a multiple of 16 blocks.
void blocks_avx512(uint64_t seed, uint64_t first, uint64_t j0, int64_t blocks, float p, float scale,
                   const float* x, float* y, float* mask);
}  // namespace dropout_detail

}  // namespace ada::cpu
