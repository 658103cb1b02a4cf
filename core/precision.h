// Precision of the CPU backend's matrix products (GEMM, batched GEMM and the convolutions built
// on them): fp32, or bf16 — both operands rounded to bfloat16 (nearest even) as they are packed,
// products summed in fp32, fp32 outputs — on CPUs with AVX512_BF16 (core/cpu_isa.h). Everything
// else (element-wise ops, reductions, normalisation, the optimizer and its fp32 master weights,
// gradients) stays fp32: this is the CPU form of mixed precision, chosen by `train.precision`.
// fp16 exists on CUDA only (set_cpu_matmul_precision refuses it). Process-wide; the default is
// fp32.
#pragma once

#include "core/tensor.h"

namespace ada {

enum class Precision { fp32, bf16, fp16 };

const char* precision_name(Precision p);
// The 16-bit type p multiplies in (and 16-bit activations are stored in); f32 for fp32.
inline DType precision_dtype(Precision p) {
  return p == Precision::bf16 ? DType::bf16 : p == Precision::fp16 ? DType::f16 : DType::f32;
}

// DeviceError, with the reason, when bf16 is asked for and the CPU cannot run it.
void set_cpu_matmul_precision(Precision p);
Precision cpu_matmul_precision();

// The CUDA backend's matrix products: fp32 (TF32 only with ADA_CUDA_TF32=1), or bf16 — both
// operands cast to bf16 (nearest even, as the CPU rounds them) and multiplied by cuBLAS as bf16
// inputs with fp32 compute on the tensor cores (the GPU form of the CPU's bf16; cuBLAS's
// FAST_16BF compute type on fp32 operands did not round like that on an H200), and cuDNN
// convolutions in TF32 (cuDNN has no bf16 mode for fp32 tensors; TF32 keeps more mantissa bits
// than bf16). fp32 tensors, outputs and everything else as above. fp16: both operands cast to
// fp16 the same way, fp32 compute (cuDNN convolutions with CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) —
// fp16's narrow range is why training with it needs loss scaling (optim/loss_scale.h).
// Process-wide; the default is fp32. Setting bf16 or fp16 in a build without CUDA throws
// DeviceError.
void set_cuda_matmul_precision(Precision p);
Precision cuda_matmul_precision();

// The dtype activations are stored in (core/ops.h): f32 (the default), or bf16 / f16 — the
// outputs of the ops that make activations from parameters (matrix products, convolutions,
// embeddings; core/functional.h) and of everything computed from them, and their gradients,
// stored 16-bit while parameters, their gradients, the optimizer, norms' statistics and losses
// stay f32: PyTorch autocast's memory. On CUDA it pairs with the matching 16-bit matrix
// precision (cuBLAS writes the rounded result itself); the CPU computes every op in f32 and
// rounds its results (no speed gained: its form for tests). Process-wide.
// DTypeError for another dtype.
void set_activation_dtype(DType d);
DType activation_dtype();

}  // namespace ada
