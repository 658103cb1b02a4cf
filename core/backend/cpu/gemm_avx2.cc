// The fp32 GEMM kernel built for AVX2+FMA (-mavx2 -mfma, AVX-512 off); flags in
// core/CMakeLists.txt.
#define ADA_GEMM_AVX512 0
#include "core/backend/cpu/gemm_f32_impl.h"

namespace ada::cpu::gemm_detail {
const Kernel& avx2_kernel() {
  return kF32Kernel;
}
}  // namespace ada::cpu::gemm_detail
