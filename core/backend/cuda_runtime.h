// The seam between core and the CUDA runtime: device memory and copies.
// Built from backend/cuda/runtime.cc with ADA_WITH_CUDA, otherwise from backend/cuda_stub.cc,
// whose functions throw DeviceError saying how to enable CUDA.
#pragma once

#include <cstddef>

namespace ada::cuda {

bool built_with_cuda();
int device_count();  // 0 when built without CUDA or when no GPU is visible
void* alloc(size_t bytes, int device);
void free(void* ptr, int device) noexcept;
// Copies between host and device memory in any direction; synchronous.
void copy(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes,
          int device);
void zero(void* ptr, size_t bytes, int device);

}  // namespace ada::cuda
