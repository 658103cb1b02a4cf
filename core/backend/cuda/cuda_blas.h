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

namespace ada::cuda {

bool allow_tf32();
void set_allow_tf32(bool on);

}  // namespace ada::cuda
