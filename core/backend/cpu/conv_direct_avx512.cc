// The direct and batch-blocked convolution kernels built for AVX-512 (32 zmm registers, 16 lanes);
// flags in core/CMakeLists.txt.
#include "core/backend/cpu/conv_avx512_params.h"
#include "core/backend/cpu/conv_blocked_impl.h"

namespace ada::cpu::conv_detail {
const DirectKernels& avx512_direct() {
  return kDirect;
}
const BlockedKernels& avx512_blocked() {
  return kBlocked;
}
}  // namespace ada::cpu::conv_detail
