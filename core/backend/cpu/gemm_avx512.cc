// The fp32 GEMM kernel built for AVX-512F (-mavx512f -mavx512bw -mavx512dq -mavx512vl); flags in
// core/CMakeLists.txt.
#define ADA_GEMM_AVX512 1
#include "core/backend/cpu/gemm_f32_impl.h"

namespace ada::cpu::gemm_detail {
const Kernel& avx512_kernel() {
  return kF32Kernel;
}
}  // namespace ada::cpu::gemm_detail
