// The direct and batch-blocked convolution kernels built for AVX2+FMA (16 ymm registers, 8 lanes);
// flags in core/CMakeLists.txt.
#define ADA_DIRECT_NAME "avx2 direct"
#define ADA_DIRECT_LANES 8
#define ADA_DIRECT_FWD_KB 4
#define ADA_DIRECT_FWD_TT 2
#define ADA_DIRECT_FLT_KB 3
#define ADA_DIRECT_FLT_KB5 1
#include "core/backend/cpu/conv_direct_impl.h"
#define ADA_BLOCKED_NAME "avx2 blocked"
#define ADA_BLOCKED_FWD_KB 4
#define ADA_BLOCKED_FWD_TT 3
#define ADA_BLOCKED_FLT_KB 3
#define ADA_BLOCKED_FLT_RT 1
#include "core/backend/cpu/conv_blocked_impl.h"

namespace ada::cpu::conv_detail {
const DirectKernels& avx2_direct() {
  return kDirect;
}
const BlockedKernels& avx2_blocked() {
  return kBlocked;
}
}  // namespace ada::cpu::conv_detail
