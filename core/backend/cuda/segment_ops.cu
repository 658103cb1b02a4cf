// Adasum's arithmetic on the GPU (core/ops.h: segment_partial_sums, segment_combine). One call
// covers every segment: the segments are cut into chunks of kChunk elements, one block each, so
// a bucket of hundreds of tensors is one launch (plus, for the sums, one small launch that adds
// each segment's chunk totals in chunk order and one copy of 3 doubles per segment to the host).
// Every sum is taken in an order fixed by the segment lengths: the same bits on every run.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/backend/cuda/cuda_common.h"
#include "core/backend/cuda/cuda_ops.h"
#include "core/backend/cuda/kernel_util.cuh"
#include "core/backend/op_shapes.h"

namespace ada::cuda {
namespace {

constexpr int64_t kChunk = 1 << 15;  // elements per block
constexpr int kBlock = 256;

struct Chunk {
  int64_t start, n;
  int64_t seg;  // index into the call's segment list
};

// The chunks of every non-empty segment, in segment order; first[i] .. first[i+1] are segment i's.
std::vector<Chunk> chunks_of(const std::vector<ops::Segment>& segs, std::vector<int64_t>& first) {
  std::vector<Chunk> chunks;
  first.assign(segs.size() + 1, 0);
  for (size_t i = 0; i < segs.size(); ++i) {
    first[i] = static_cast<int64_t>(chunks.size());
    for (int64_t off = 0; off < segs[i].n; off += kChunk)
      chunks.push_back(
          {segs[i].off + off, std::min(kChunk, segs[i].n - off), static_cast<int64_t>(i)});
  }
  first[segs.size()] = static_cast<int64_t>(chunks.size());
  return chunks;
}

template <class T>
void upload(const std::vector<T>& host, const Scratch& dst, int dev) {
  copy(dst.get(), true, host.data(), false, host.size() * sizeof(T), dev);
}

__global__ void chunk_sums_kernel(const float* a, const float* b, const Chunk* chunks,
                                  double* part) {
  __shared__ double sh[33];
  const Chunk c = chunks[blockIdx.x];
  double d = 0, x = 0, y = 0;
  for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x) {
    const double ai = a[c.start + i], bi = b[c.start + i];
    d += ai * bi;
    x += ai * ai;
    y += bi * bi;
  }
  d = kernel::block_sum(d, sh);
  x = kernel::block_sum(x, sh);
  y = kernel::block_sum(y, sh);
  if (threadIdx.x == 0) {
    part[3 * blockIdx.x] = d;
    part[3 * blockIdx.x + 1] = x;
    part[3 * blockIdx.x + 2] = y;
  }
}

// One thread per segment: its chunks' totals in chunk order.
__global__ void segment_sums_kernel(const double* part, const int64_t* first, int64_t nseg,
                                    double* out) {
  const int64_t s = kernel::global_tid();
  if (s >= nseg) return;
  double d = 0, x = 0, y = 0;
  for (int64_t k = first[s]; k < first[s + 1]; ++k) {
    d += part[3 * k];
    x += part[3 * k + 1];
    y += part[3 * k + 2];
  }
  out[3 * s] = d;
  out[3 * s + 1] = x;
  out[3 * s + 2] = y;
}

__global__ void combine_kernel(const float* a, const float* b, float* out, const Chunk* chunks,
                               const double* coef) {
  const Chunk c = chunks[blockIdx.x];
  const double ca = coef[2 * c.seg], cb = coef[2 * c.seg + 1];
  if (cb == 0) {
    for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x)
      out[c.start + i] = static_cast<float>(ca * a[c.start + i]);
  } else {
    for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x)
      out[c.start + i] = static_cast<float>(ca * a[c.start + i] + cb * b[c.start + i]);
  }
}

}  // namespace

void segment_partial_sums(const Tensor& a, const Tensor& b, const std::vector<ops::Segment>& segs,
                          double* sums) {
  const int dev = require_f32("segment_partial_sums", {&a, &b});
  backend::check_segments("segment_partial_sums", a, b, nullptr, segs);
  std::vector<int64_t> first;
  const std::vector<Chunk> chunks = chunks_of(segs, first);
  if (chunks.empty()) return;
  const int64_t nseg = static_cast<int64_t>(segs.size());
  Scratch d_chunks(chunks.size() * sizeof(Chunk), dev),
      d_first(first.size() * sizeof(int64_t), dev);
  Scratch d_part(chunks.size() * 3 * sizeof(double), dev), d_out(nseg * 3 * sizeof(double), dev);
  upload(chunks, d_chunks, dev);
  upload(first, d_first, dev);
  chunk_sums_kernel<<<static_cast<unsigned>(chunks.size()), kBlock, 0, stream(dev)>>>(
      a.data<float>(), b.data<float>(), d_chunks.as<const Chunk>(), d_part.as<double>());
  ADA_CUDA_LAUNCH_CHECK();
  segment_sums_kernel<<<blocks_for(nseg), kThreads, 0, stream(dev)>>>(
      d_part.as<const double>(), d_first.as<const int64_t>(), nseg, d_out.as<double>());
  ADA_CUDA_LAUNCH_CHECK();
  std::vector<double> host(3 * nseg);
  copy(host.data(), false, d_out.get(), true, host.size() * sizeof(double), dev);
  for (int64_t i = 0; i < nseg; ++i)
    for (int k = 0; k < 3; ++k) sums[3 * segs[i].slot + k] += host[3 * i + k];
}

void segment_combine(const Tensor& a, const Tensor& b, Tensor& out,
                     const std::vector<ops::Segment>& segs, const double* coef) {
  const int dev = require_f32("segment_combine", {&a, &b, &out});
  backend::check_segments("segment_combine", a, b, &out, segs);
  std::vector<int64_t> first;
  const std::vector<Chunk> chunks = chunks_of(segs, first);
  if (chunks.empty()) return;
  std::vector<double> seg_coef(2 * segs.size());
  for (size_t i = 0; i < segs.size(); ++i) {
    seg_coef[2 * i] = coef[2 * segs[i].slot];
    seg_coef[2 * i + 1] = coef[2 * segs[i].slot + 1];
  }
  Scratch d_chunks(chunks.size() * sizeof(Chunk), dev),
      d_coef(seg_coef.size() * sizeof(double), dev);
  upload(chunks, d_chunks, dev);
  upload(seg_coef, d_coef, dev);
  combine_kernel<<<static_cast<unsigned>(chunks.size()), kBlock, 0, stream(dev)>>>(
      a.data<float>(), b.data<float>(), out.data<float>(), d_chunks.as<const Chunk>(),
      d_coef.as<const double>());
  ADA_CUDA_LAUNCH_CHECK();
}

}  // namespace ada::cuda
