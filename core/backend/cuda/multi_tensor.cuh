// Multi-tensor launches (.cu files only): a list of tensors cut into chunks of kChunk elements,
// one block per chunk, so that one launch covers every parameter of a model. The per-tensor
// descriptors (a struct of the kernel's choosing) and the chunk list go to the device in one
// asynchronous copy from pinned staging memory (a copy from pageable memory may wait for the
// stream): nothing waits for the device unless it is kStagingSlots calls behind the host.
// Reductions write one value per chunk and sum them in a fixed order (in a later launch), so a
// tensor's result depends neither on the run nor on the other tensors of the list.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
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

// Pinned host buffers for the tables, used in turn: a slot is written again only after the copy
// that last read it has finished (its event), and grows when a table outgrows it.
constexpr int kStagingSlots = 8;
class TableStaging {
 public:
  // Copies `bytes` of `host` to `dst` on `stream` (cuda:`device`'s) through the next slot. While
  // the device is captured into a CUDA graph the copy reads a pinned buffer of its own instead,
  // kept as long as the graph (keep_for_graph): every replay copies the table again from it.
  void copy(void* dst, const void* host, size_t bytes, cudaStream_t stream, int device) {
    if (capturing(device)) {
      void* pinned = nullptr;
      ADA_CUDA_CHECK(cudaHostAlloc(&pinned, bytes, cudaHostAllocDefault));
      keep_for_graph(device, pinned);
      std::memcpy(pinned, host, bytes);
      ADA_CUDA_CHECK(cudaMemcpyAsync(dst, pinned, bytes, cudaMemcpyHostToDevice, stream));
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    Slot& s = slots_[next_];
    next_ = (next_ + 1) % kStagingSlots;
    if (!s.done) ADA_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
    ADA_CUDA_CHECK(cudaEventSynchronize(s.done));  // at once unless the device is far behind
    if (s.bytes < bytes) {
      const size_t grown = std::max<size_t>(bytes, 2 * s.bytes + 4096);
      if (s.pinned) ADA_CUDA_CHECK(cudaFreeHost(s.pinned));
      s.pinned = nullptr;
      s.bytes = 0;
      ADA_CUDA_CHECK(cudaHostAlloc(&s.pinned, grown, cudaHostAllocDefault));
      s.bytes = grown;
    }
    std::memcpy(s.pinned, host, bytes);
    ADA_CUDA_CHECK(cudaMemcpyAsync(dst, s.pinned, bytes, cudaMemcpyHostToDevice, stream));
    ADA_CUDA_CHECK(cudaEventRecord(s.done, stream));
  }

 private:
  struct Slot {
    void* pinned = nullptr;
    size_t bytes = 0;
    cudaEvent_t done = nullptr;
  };
  std::mutex mu_;
  Slot slots_[kStagingSlots];
  int next_ = 0;
};

// The staging of `device` (made current by the caller). One per device for the life of the
// process, never destroyed: at exit the CUDA runtime may already be gone, and the process's end
// frees pinned memory.
inline TableStaging& staging(int device) {
  static std::mutex mu;
  static auto* per_device = new std::vector<TableStaging*>();
  std::lock_guard<std::mutex> lock(mu);
  if (static_cast<size_t>(device) >= per_device->size()) per_device->resize(device + 1, nullptr);
  if (!(*per_device)[device]) (*per_device)[device] = new TableStaging();
  return *(*per_device)[device];
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
    if (!host.empty()) staging(dev).copy(buf_.get(), host.data(), host.size(), stream(dev), dev);
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
