// Precision of the CPU backend's matrix products (GEMM, batched GEMM and the convolutions built
// on them): fp32, or bf16 — both operands rounded to bfloat16 (nearest even) as they are packed,
// products summed in fp32, fp32 outputs — on CPUs with AVX512_BF16 (core/cpu_isa.h). Everything
// else (element-wise ops, reductions, normalisation, the optimizer and its fp32 master weights,
// gradients) stays fp32: this is the CPU form of mixed precision, chosen by `train.precision`.
// Process-wide; the default is fp32.
#pragma once

namespace ada {

enum class Precision { fp32, bf16 };

const char* precision_name(Precision p);

// DeviceError, with the reason, when bf16 is asked for and the CPU cannot run it.
void set_cpu_matmul_precision(Precision p);
Precision cpu_matmul_precision();

}  // namespace ada
