// The CUDA backend's fp32 math-mode switch for GEMMs (cuBLAS) and convolutions (cuDNN).
// Off (the default): full fp32 everywhere. cuBLAS computes with CUBLAS_COMPUTE_32F, and cuDNN
// convolutions run with CUDNN_FMA_MATH, which rules out the TF32 tensor-core kernels that
// cuDNN's default math mode would otherwise pick for fp32 on Ampere and later. Results then
// match the CPU reference to fp32 summation-order differences (what the `cuda` tests demand).
// On: cuBLAS uses CUBLAS_COMPUTE_32F_FAST_TF32 and cuDNN CUDNN_TENSOR_OP_MATH, so inputs may be
// rounded to TF32 (10-bit mantissa) inside the products: faster, ~1e-3 relative error.
// The initial value comes from the environment at first use: ADA_CUDA_TF32=1 turns it on (any
// other value or none leaves it off); set_allow_tf32 overrides it for the whole process, and
// takes effect at the next GEMM or convolution (cached convolution plans are keyed by the mode).
// Defined only in builds with ADA_WITH_CUDA.
#pragma once

#include "core/backend/cuda/cuda_common.h"
#include "core/backend/cuda/cuda_ops.h"

namespace ada::cuda {

bool allow_tf32();
void set_allow_tf32(bool on);

// A GEMM operand as cuBLAS multiplies it under train.precision (blas.cc, blas_lt.cc): the tensor
// itself when it is f32 under fp32 or already of the 16-bit type, else the f32 tensor rounded to
// the 16-bit type (nearest even, as autocast casts) into scratch, freed behind the caller's GEMM
// on the stream.
struct GemmOperand {
  const void* p = nullptr;
  Scratch scratch;
  GemmOperand(const Tensor& t, DType narrow, int dev)
      : scratch(narrow != DType::f32 && t.dtype() == DType::f32 ? static_cast<size_t>(t.numel()) * 2
                                                                : 0,
                dev) {
    if (scratch.get()) {
      round_f32(t.data<float>(), scratch.get(), t.numel(), narrow, dev);
      p = scratch.get();
    } else {
      p = t.raw_data();
    }
  }
};

}  // namespace ada::cuda
