// CUDA runtime seam: device memory and synchronous copies, every status checked.
#include <cuda_runtime.h>

#include "core/backend/cuda_runtime.h"
#include "core/error.h"

#define ADA_CUDA_CHECK(call) \
  ADA_CHECK_STATUS(ExternalError, "CUDA", call, cudaSuccess, [](cudaError_t e) { return std::string(cudaGetErrorString(e)); })

namespace ada::cuda {
bool built_with_cuda() { return true; }
int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}
void* alloc(size_t bytes, int device) {
  void* p = nullptr;
  ADA_CUDA_CHECK(cudaSetDevice(device));
  ADA_CUDA_CHECK(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
  return p;
}
void free(void* ptr, int device) noexcept {
  cudaSetDevice(device);
  cudaFree(ptr);
}
void copy(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes,
          int device) {
  ADA_CUDA_CHECK(cudaSetDevice(device));
  cudaMemcpyKind kind = dst_on_device ? (src_on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                      : (src_on_device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  ADA_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));
}
void zero(void* ptr, size_t bytes, int device) {
  ADA_CUDA_CHECK(cudaSetDevice(device));
  ADA_CUDA_CHECK(cudaMemset(ptr, 0, bytes));
}
}  // namespace ada::cuda
