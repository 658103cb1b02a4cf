// Helpers shared by the CUDA backend's files: status checks that name the call, file:line and
// rank; the per-device compute stream and the cuBLAS/cuDNN handles bound to it; argument checks
// that name the op; launch geometry; scratch memory from the caching allocator.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <initializer_list>

#include "base/error.h"
#include "core/backend/cuda_runtime.h"
#include "core/tensor.h"

#define ADA_CUDA_CHECK(call)                                 \
  ADA_CHECK_STATUS(ExternalError, "CUDA", call, cudaSuccess, \
                   [](cudaError_t e) { return std::string(cudaGetErrorString(e)); })
#define ADA_CUBLAS_CHECK(call)                                           \
  ADA_CHECK_STATUS(ExternalError, "cuBLAS", call, CUBLAS_STATUS_SUCCESS, \
                   [](cublasStatus_t e) { return std::string(cublasGetStatusString(e)); })
#define ADA_CUDNN_CHECK(call)                                          \
  ADA_CHECK_STATUS(ExternalError, "cuDNN", call, CUDNN_STATUS_SUCCESS, \
                   [](cudnnStatus_t e) { return std::string(cudnnGetErrorString(e)); })
// After a kernel launch: a bad configuration shows up here, not at the next sync.
#define ADA_CUDA_LAUNCH_CHECK() ADA_CUDA_CHECK(cudaGetLastError())

namespace ada::cuda {

// The device's compute stream (non-blocking, created on first use). Every kernel, cuBLAS and
// cuDNN call and every copy of the backend goes on it.
cudaStream_t stream(int device);
// Handles bound to stream(device), created on first use.
cublasHandle_t cublas(int device);
cudnnHandle_t cudnn(int device);

// cuDNN's type for a tensor of f32, or of the 16-bit type of 16-bit activations.
inline cudnnDataType_t cudnn_data_type(DType t) {
  return t == DType::bf16  ? CUDNN_DATA_BFLOAT16
         : t == DType::f16 ? CUDNN_DATA_HALF
                           : CUDNN_DATA_FLOAT;
}

// Makes `device` current for the calling thread (cheap when it already is).
void set_device(int device);

// Every tensor defined, f32 (or `also`, when given) and on one CUDA device; returns that device's
// index and makes it current. Throws ShapeError/DTypeError/DeviceError naming `op`.
int require_f32(const char* op, std::initializer_list<const Tensor*> ts, DType also = DType::f32);
// Every tensor (defined) on CUDA device `device`: for tensors whose dtype was checked apart.
void require_on(const char* op, int device, std::initializer_list<const Tensor*> ts);
// An index tensor (i32 or i64) on `device`.
void require_index(const char* op, const Tensor& t, const char* arg, int device);

// A device buffer from the caching allocator, freed (returned to the cache) on scope exit.
class Scratch {
 public:
  Scratch(size_t bytes, int device) : device_(device), bytes_(bytes) {
    ptr_ = bytes ? alloc(bytes, device) : nullptr;
  }
  ~Scratch() {
    if (ptr_) free(ptr_, bytes_, device_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  int device_;
  size_t bytes_;
  void* ptr_ = nullptr;
};

// Deferred device errors. An op whose input is bad in a way only its data shows (an id or a
// target out of range) does not wait for the device to find out: its kernel records the first
// such fault in a per-device slot of mapped host memory (record_fault in fault.cuh), and the host
// raises it as a ShapeError, naming the op, the position and the value, at its next wait for the
// device: a copy to the host (a loss, a metric, Tensor::to), synchronize(), or wait_for(). The
// error therefore arrives a few ops after the one that found it, but before any result of that
// op can be read.
enum FaultCode : unsigned int {
  kFaultNone = 0,
  kFaultEmbeddingId = 1,          // where: position, value: the id, limit: the vocabulary
  kFaultEmbeddingBackwardId = 2,  // the same, in the backward
  kFaultCrossEntropyTarget = 3,   // where: row, value: the target, limit: classes, extra: ignore
};
struct DeviceFault {
  unsigned int code;  // FaultCode
  unsigned int unused;
  long long where, value, limit, extra;
};
DeviceFault* device_fault_slot(int device);  // the device's view of the slot, for kernels
// Queues (no wait) the check of a position that a kernel lowered with atomicMin from ~0 in
// *bad: when one was found, the index at that position of `ids` (i64 or i32, on the device) is
// recorded as fault `code` with `limit` and `extra` (misc.cu).
void record_bad_index(const unsigned long long* bad, const Tensor& ids, FaultCode code,
                      long long limit, long long extra, int device);
// Throws the recorded fault, if any, and clears it; call after waiting for the stream.
void raise_device_fault(int device);
// Waits for the device's compute stream, then raises a recorded fault.
void wait_for(int device);

// CUDA graphs (cuda_runtime.h, Graph): throws DeviceError "`op` cannot be captured in a CUDA graph:
// `why`" while the compute stream of `device` is being captured; nothing otherwise. Ops call it
// before doing what a replay could not repeat (a wait for the device, a copy from or to host
// memory, a host value that changes every step).
void refuse_in_capture(int device, const char* op, const char* why);
// Pinned host memory (cudaHostAlloc) that a captured copy reads: kept, and freed with
// cudaFreeHost, when the graph being captured on `device` is destroyed. Only while capturing.
void keep_for_graph(int device, void* pinned);
// The device's Philox shift (one uint64, 0 except while a CUDA graph's replay runs, see
// cuda_runtime.h, Graph): kernels that draw dropout masks add it to their first counter.
const uint64_t* philox_shift(int device);
// Queues *p = v on `s` (one thread; misc.cu): a device word set in stream order without a copy
// from host memory.
void write_u64(uint64_t* p, uint64_t v, cudaStream_t s);

// Grid-stride launch geometry for n elements.
constexpr int kThreads = 256;
inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 65535LL * 8) b = 65535LL * 8;
  return static_cast<unsigned>(b);
}

}  // namespace ada::cuda
