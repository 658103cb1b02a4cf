// Multi-tensor launches (.cu files only): a list of tensors cut into chunks of kChunk elements,
// one block per chunk, so that one launch covers every parameter of a model. The per-tensor
// descriptors (a struct of the kernel's choosing) and the chunk list go to the device in one
// copy from pageable memory, which the driver stages at once: nothing waits for the device.
// Reductions write one value per chunk and sum them in a fixed order (in a later launch), so a
// tensor's result depends neither on the run nor on the other tensors of the list.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/backend/cuda/cuda_common.h"

namespace ada::cuda::multi {

constexpr int64_t kChunk = int64_t{1} << 15;

struct Chunk {
  int32_t t;      // the tensor (index into the descriptors)
  int32_t index;  // the chunk's index within its tensor
  int64_t begin;  // its first element
};

// Chunks of every tensor in order; first (when given) gets each tensor's first chunk (a tensor
// with no element has none). ShapeError past 2^31 chunks (a grid's limit).
inline std::vector<Chunk> chunks_of(const std::vector<int64_t>& sizes,
                                    std::vector<int32_t>* first = nullptr) {
  std::vector<Chunk> out;
  for (size_t t = 0; t < sizes.size(); ++t) {
    if (first) first->push_back(static_cast<int32_t>(out.size()));
    int32_t k = 0;
    for (int64_t b = 0; b < sizes[t]; b += kChunk, ++k) {
      ADA_CHECK_ARG(out.size() < (size_t{1} << 31) - 1, ShapeError)
          << "multi-tensor launch: more than 2^31 chunks of " << kChunk << " elements";
      out.push_back({static_cast<int32_t>(t), k, b});
    }
  }
  return out;
}

inline unsigned grid_of(const std::vector<Chunk>& chunks) {
  return static_cast<unsigned>(chunks.size());
}

// The descriptors and the chunk list on the device, for the launches of one call (stream-ordered:
// freed to the caching allocator when the call returns).
template <class Desc>
class DeviceTable {
 public:
  DeviceTable(const std::vector<Desc>& descs, const std::vector<Chunk>& chunks, int dev)
      : chunks_off_(align(descs.size() * sizeof(Desc))),
        buf_(chunks_off_ + chunks.size() * sizeof(Chunk), dev) {
    std::vector<unsigned char> host(buf_.bytes());
    if (!descs.empty()) std::memcpy(host.data(), descs.data(), descs.size() * sizeof(Desc));
    if (!chunks.empty())
      std::memcpy(host.data() + chunks_off_, chunks.data(), chunks.size() * sizeof(Chunk));
    if (!host.empty())
      ADA_CUDA_CHECK(cudaMemcpyAsync(buf_.get(), host.data(), host.size(), cudaMemcpyHostToDevice,
                                     stream(dev)));
  }
  const Desc* descs() const { return buf_.as<Desc>(); }
  const Chunk* chunks() const {
    return reinterpret_cast<const Chunk*>(buf_.as<unsigned char>() + chunks_off_);
  }

 private:
  static size_t align(size_t b) { return (b + 15) / 16 * 16; }
  size_t chunks_off_;
  Scratch buf_;
};

// One past the chunk's last element in a tensor of n.
__device__ __forceinline__ int64_t chunk_end(const Chunk& c, int64_t n) {
  return c.begin + kChunk < n ? c.begin + kChunk : n;
}

// A tensor of a list that a kernel only reads or scales.
struct FloatDesc {
  float* p;
  int64_t n;
};

}  // namespace ada::cuda::multi
