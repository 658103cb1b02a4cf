// cast_out on the device (core/ops.h): f32 <-> f16 / bf16 with CUDA's round-to-nearest-even
// intrinsics, the same values as the CPU's conversion.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/backend/cuda/cuda_common.h"
#include "core/backend/cuda/cuda_ops.h"
#include "core/backend/cuda/kernel_util.cuh"
#include "core/backend/op_shapes.h"

namespace ada::cuda {
namespace {

using kernel::bf16_of;
using kernel::f16_of;
using kernel::f32_of;

__global__ void f32_to_f16(const float* x, __half* y, int64_t n) {
  for (int64_t i = kernel::global_tid(); i < n; i += kernel::global_stride()) y[i] = f16_of(x[i]);
}
__global__ void f32_to_bf16(const float* x, __nv_bfloat16* y, int64_t n) {
  for (int64_t i = kernel::global_tid(); i < n; i += kernel::global_stride()) y[i] = bf16_of(x[i]);
}
__global__ void f16_to_f32(const __half* x, float* y, int64_t n) {
  for (int64_t i = kernel::global_tid(); i < n; i += kernel::global_stride()) y[i] = f32_of(x[i]);
}
__global__ void bf16_to_f32(const __nv_bfloat16* x, float* y, int64_t n) {
  for (int64_t i = kernel::global_tid(); i < n; i += kernel::global_stride())
    y[i] = __bfloat162float(x[i]);
}

int require_device(const Tensor& a, const Tensor& b) {
  ADA_CHECK_ARG(a.defined() && b.defined(), ShapeError) << "cast_out: an argument is undefined";
  ADA_CHECK_ARG(!a.device().is_cpu() && a.device() == b.device(), DeviceError)
      << "cast_out: " << a.str() << " and " << b.str() << " must be on one CUDA device";
  set_device(a.device().index);
  return a.device().index;
}

}  // namespace

void cast_out(const Tensor& src, Tensor& dst) {
  const int dev = require_device(src, dst);
  backend::check_cast(src, dst);
  const int64_t n = src.numel();
  if (n == 0) return;
  cudaStream_t s = stream(dev);
  const DType from = src.dtype(), to = dst.dtype();
  if (from == DType::f32 && to == DType::f32) {
    if (src.data<float>() != dst.data<float>())
      ADA_CUDA_CHECK(cudaMemcpyAsync(dst.data<float>(), src.data<float>(), n * sizeof(float),
                                     cudaMemcpyDeviceToDevice, s));
    return;
  }
  if (to == DType::f16 || to == DType::bf16)
    return round_f32(src.data<float>(), dst.raw_data(), n, to, dev);
  float* y32 = dst.data<float>();
  if (from == DType::f16)
    f16_to_f32<<<blocks_for(n), kThreads, 0, s>>>(reinterpret_cast<const __half*>(src.data<Half>()),
                                                  y32, n);
  else
    bf16_to_f32<<<blocks_for(n), kThreads, 0, s>>>(
        reinterpret_cast<const __nv_bfloat16*>(src.data<BFloat16>()), y32, n);
  ADA_CUDA_LAUNCH_CHECK();
}

void round_f32(const float* x, void* y, int64_t n, DType to, int dev) {
  ADA_CHECK(to == DType::f16 || to == DType::bf16)
      << "round_f32: to " << dtype_name(to) << ", not f16 or bf16";
  if (n == 0) return;
  set_device(dev);
  cudaStream_t s = stream(dev);
  if (to == DType::f16)
    f32_to_f16<<<blocks_for(n), kThreads, 0, s>>>(x, static_cast<__half*>(y), n);
  else
    f32_to_bf16<<<blocks_for(n), kThreads, 0, s>>>(x, static_cast<__nv_bfloat16*>(y), n);
  ADA_CUDA_LAUNCH_CHECK();
}

}  // namespace ada::cuda
