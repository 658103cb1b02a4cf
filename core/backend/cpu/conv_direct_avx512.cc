// The direct and batch-blocked convolution kernels built for AVX-512 (32 zmm registers, 16 lanes);
// flags in core/CMakeLists.txt.
#define ADA_DIRECT_NAME "avx512 direct"
#define ADA_DIRECT_LANES 16
#define ADA_DIRECT_FWD_KB 8
#define ADA_DIRECT_FWD_TT 3
#define ADA_DIRECT_FLT_KB 4
#define ADA_DIRECT_FLT_KB5 4
#include "core/backend/cpu/conv_direct_impl.h"
#define ADA_BLOCKED_NAME "avx512 blocked"
#define ADA_BLOCKED_FWD_KB 8
#define ADA_BLOCKED_FWD_TT 3
#define ADA_BLOCKED_FLT_KB 8
#define ADA_BLOCKED_FLT_RT 1
#include "core/backend/cpu/conv_blocked_impl.h"

namespace ada::cpu::conv_detail {
const DirectKernels& avx512_direct() { return kDirect; }
const BlockedKernels& avx512_blocked() { return kBlocked; }
}  // namespace ada::cpu::conv_detail
