// The seam between core and the CUDA runtime: device memory (a caching allocator), the compute
// stream, copies and the allocator's statistics. Built from backend/cuda/runtime.cc with
// ADA_WITH_CUDA, otherwise from backend/cuda_stub.cc, whose functions that need a GPU throw
// DeviceError saying how to enable CUDA. No CUDA header is included here: core stays plain C++.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/block_cache.h"

namespace ada {
class Generator;
class Tensor;
}  // namespace ada

namespace ada::cuda {

bool built_with_cuda();
int device_count();  // 0 when built without CUDA or when no GPU is visible
// Why no CUDA device can be used here, or "" when one can (the text the `cuda` tests print
// when they skip, and the trainer's error for train.device: cuda).
std::string unavailable_reason();
// Checks `index` names a visible device; throws DeviceError naming what exists otherwise.
void require_device(int index);
std::string device_name(int index);
// The GPU's UUID (16 bytes; the same in every process that sees that GPU, whatever its index
// there under CUDA_VISIBLE_DEVICES).
std::array<uint8_t, 16> device_uuid(int index);

// Device memory from a caching allocator: freed blocks go back to a size-binned free list of
// their device and are reused by later allocations of the same bin, so a training step in steady
// state calls cudaMalloc/cudaFree not at all. Every kernel runs on the device's one compute
// stream, so a block freed on the host can be handed out again at once: the stream orders the
// old user's kernels before the new user's. (A second stream, for communication, must record
// its use of a block before freeing it; that is the comm backend's business.)
void* alloc(size_t bytes, int device);
// `ptr` from alloc(bytes, device) with the same `bytes`.
void free(void* ptr, size_t bytes, int device) noexcept;
// Returns every cached (unused) block to the driver.
void empty_cache(int device);
// allocated / reserved and their peaks; system_allocs counts cudaMalloc calls (steady state:
// constant).
using MemoryStats = ada::MemoryStats;
MemoryStats memory_stats(int device);
void reset_peak(int device);

// Copies between host and device memory in any direction, ordered on the device's compute
// stream; returns when the destination may be read by the host (device to host: waits for the
// stream) and the source may be reused by the host (host to device: once staged, without
// waiting for the kernels queued before it). A wait for the device (device to host, and
// synchronize) raises a data error a queued kernel found (an id or target out of range) as a
// ShapeError naming the op (cuda_common.h, DeviceFault).
void copy(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes,
          int device);
void zero(void* ptr, size_t bytes, int device);
// Waits for everything queued on the device's compute stream (benchmarks, tests).
void synchronize(int device);

// Host-to-device copies of training batches off the compute stream (the trainer on a GPU). Each
// upload stages the host tensors in pinned memory and copies them on a copy stream of its own,
// so the copy runs while the compute stream still works through what was queued before (the
// previous step's backward and update); the compute stream waits for the copy (an event) before
// anything queued after upload() returns. Two slots of pinned and device buffers alternate; a
// slot is rewritten only after the compute stream has passed the point where the next batch was
// handed over, by which time every use of the slot's old batch was queued. So the returned
// tensors are valid until the upload after the next one; their device memory is kept across
// uploads (grown when a batch is larger: then that copy also waits for the compute stream).
// Without CUDA, or without a GPU, the constructor throws DeviceError.
class BatchUploader {
 public:
  explicit BatchUploader(int device);
  ~BatchUploader();
  BatchUploader(const BatchUploader&) = delete;
  BatchUploader& operator=(const BatchUploader&) = delete;
  // CPU tensors (any dtype) in, the same names and shapes on the device out.
  std::map<std::string, Tensor> upload(const std::map<std::string, Tensor>& host);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// CUDA graphs (bench_step --graphs): the work one call of `work` queues on the compute stream of
// cuda:`device`, captured once (nothing runs) and then run by replay() as one launch. A replay
// repeats exactly what was captured: the same kernels, on the same addresses, with the same
// arguments. Hence:
//  - Memory: what the work allocates while it is captured comes from a pool of the graph's own,
//    kept while the graph lives (it is every replay's working memory; tensors the work leaves
//    behind, such as gradients, live there and are rewritten by each replay); blocks of the
//    device's pool that the work frees are kept out of reuse until the graph is destroyed (its
//    kernels still touch them). Tensors made before the capture that the work reads or writes
//    (parameters, optimizer state, the input batch) must stay alive, unmoved, while it is
//    replayed: write new inputs into them (copy_from), never replace them.
//  - Values: host values handed to ops are the capture's (an SGD step's LR). Ops whose host
//    values change from step to step refuse to be captured, with a DeviceError naming the op:
//    Adam and LAMB (bias corrections: run the optimizer eagerly after each replay), SGD's first
//    update of a parameter; so does anything that waits for the device or reads device memory on
//    the host (a loss read, a finite check, a copy to the host) or copies host memory to the
//    device. Each such refusal is a step towards graphs in the trainer (device-side step scalars,
//    a loss read after the step).
//  - Dropout: give capture() the generator the work's dropout draws from (a model's rng()); a
//    draw from any other refuses. The capture reserves that step's counters on it (as an eager
//    step would) and the first replay uses them; each later replay takes the next step's from
//    the generator on the host and shifts the captured counters on the device by the
//    difference (the kernels add a per-device Philox shift, 0 outside replays), so replays draw
//    the masks eager steps would.
// A refused capture is abandoned: the error propagates, no kernel of the work ran, this Graph
// stays empty and the device goes on working eagerly; host-side effects of the work up to the
// refusal remain, over memory no kernel wrote (gradients first made in the capture, optimizer
// state an optimizer made in it and its update counts): zero_grad before the next step, and do
// not go on with an optimizer that first stepped inside a refused capture. Run the work eagerly
// at least once first, so that plans, workspaces and optimizer state exist. The capturing thread
// must be the only one queuing work on the device until capture() returns (an op another thread
// queues meanwhile lands in the graph, or fails). While a capture runs no memory goes back to the
// driver (a graph's pool keeps its cached blocks even when the driver has no more: that
// allocation fails instead).
// Without CUDA (or a GPU) capture() throws DeviceError.
class Graph {
 public:
  Graph();
  ~Graph();  // waits for its replays, then gives its memory back
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  void capture(int device, const std::function<void()>& work, Generator* generator = nullptr);
  void replay();               // queues one run of the captured work; DeviceError when none
  bool captured() const;       // a capture() succeeded
  int64_t nodes() const;       // the captured graph's nodes (kernels, copies, memsets)
  int64_t pool_bytes() const;  // device memory held by the graph's pool (live and cached)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
// Whether the compute stream of cuda:`device` is being captured (false without CUDA).
bool capturing(int device);
// Called by every op that draws counters from `gen` for work on cuda:`device`, before the draw:
// while this thread captures that device, a generator other than the capture's refuses
// (DeviceError); nothing otherwise.
void note_draw(int device, const Generator& gen);

// Per-op GPU time (bench_step --profile): while enabled, every op that the dispatch sends to the
// CUDA backend is bracketed by two events on its stream; profile_report() waits for them and
// returns one line per op name with its calls, total GPU milliseconds and share, largest first,
// the host's milliseconds inside the op (launching, checks, allocation) and the GPU's idle time
// just before the op (the host was late: what a launch-bound step loses). Ops called inside
// another op (a composition) are listed but not added to the totals. Off by default; then an
// OpTimer costs one branch.
void set_profiling(bool on);
std::string profile_report();
// Per-kernel GPU time (bench_step --profile, after the per-op steps): while enabled, CUPTI
// records every kernel, each attributed to the innermost op that launched it
// (core/backend/cuda/kernel_trace.h; CUPTI from ADA_CUPTI_LIBRARY or libcupti.so.13);
// kernel_trace_report() returns core/kernel_report.h's table, or why there is none. Kept apart
// from set_profiling: tracing the API calls slows the host, which the per-op table measures.
void set_kernel_tracing(bool on);
std::string kernel_trace_report();
// How many linear layers' GEMMs ran with their bias in cuBLASLt's epilogue and how many fell back
// to the unfused kernels, over the process (core/backend/cuda/blas_lt.cc), as one line.
std::string epilogue_report();
// One line per cuDNN convolution plan made so far in the process (core/backend/cuda/conv.cc):
// direction, shape, layout, dtype, the algorithm and math type chosen, and whether cuDNN's
// heuristic offered it or algorithm 0 was taken. "" when none.
std::string conv_plans_report();
class OpTimer {
 public:
  explicit OpTimer(const char* op);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  const char* op_;
  void* start_ = nullptr;  // a cudaEvent_t while profiling
  int device_ = 0;
  int depth_ = 0;  // ops around this one
  int64_t host_start_ns_ = 0;
  bool traced_ = false;  // this op's name pushed for the kernel tracer
};

}  // namespace ada::cuda
