// What the CPU convolutions (conv.cc) choose for a shape; for tests and benchmarks.
#pragma once

#include "core/ops.h"

namespace ada::cpu {

enum class ConvPass { forward, backward_data, backward_filter };

// The name of the direct kernels ("avx512 direct", conv_direct.h) that conv2d_forward,
// conv2d_backward_data or conv2d_backward_filter (`pass`) runs for these shapes at the current
// ISA and matmul precision, or nullptr when it takes im2col + GEMM.
const char* conv_direct_kernels(const Shape& x, const Shape& w, const ops::Conv2dParams& p,
                                ConvPass pass);

}  // namespace ada::cpu
