// The AVX-512 register tiles of the direct and blocked convolution kernels (conv_direct_impl.h,
// conv_blocked_impl.h), for the translation units that build them: conv_direct_avx512.cc and
// conv_blocked_bf16.cc (which reuses the AVX-512 helpers). Not a header to include elsewhere.
#pragma once

#define ADA_DIRECT_NAME "avx512 direct"
#define ADA_DIRECT_LANES 16
#define ADA_DIRECT_FWD_KB 8
#define ADA_DIRECT_FWD_TT 3
#define ADA_DIRECT_FLT_KB 4
#define ADA_DIRECT_FLT_KB5 4
#define ADA_BLOCKED_NAME "avx512 blocked"
#define ADA_BLOCKED_FWD_KB 8
#define ADA_BLOCKED_FWD_TT 3
#define ADA_BLOCKED_FLT_KB 8
#define ADA_BLOCKED_FLT_RT 1
