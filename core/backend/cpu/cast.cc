// cast_out: f32 <-> f16 / bf16 (core/ops.h), round to nearest even (core/half.h's rules; the f16
// loops use _Float16 directly so they vectorise).
#include <cstring>

#include "core/backend/cpu/cpu_common.h"
#include "core/backend/cpu/cpu_ops.h"
#include "core/backend/op_shapes.h"
#include "core/half.h"
#include "core/ops.h"

namespace ada::cpu {

void cast_out(const Tensor& src, Tensor& dst) {
  require_cpu("cast_out", src);
  require_cpu("cast_out", dst);
  backend::check_cast(src, dst);
  const int64_t n = src.numel();
  const DType from = src.dtype(), to = dst.dtype();
  if (from == DType::f32 && to == DType::f32) {
    if (src.data<float>() != dst.data<float>())
      std::memcpy(dst.data<float>(), src.data<float>(), n * sizeof(float));
    return;
  }
  parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    if (from == DType::f32) {
      const float* x = src.data<float>();
      if (to == DType::bf16) {
        uint16_t* y = &dst.data<BFloat16>()->bits;
        for (int64_t i = b; i < e; ++i) y[i] = half::bf16_from_float(x[i]);
      } else {
#ifdef ADA_HAVE_FLOAT16
        _Float16* y = reinterpret_cast<_Float16*>(dst.data<Half>());
#pragma omp simd
        for (int64_t i = b; i < e; ++i) y[i] = static_cast<_Float16>(x[i]);
#else
        uint16_t* y = &dst.data<Half>()->bits;
        for (int64_t i = b; i < e; ++i) y[i] = half::f16_from_float(x[i]);
#endif
      }
    } else {
      float* y = dst.data<float>();
      if (from == DType::bf16) {
        const uint16_t* x = &src.data<BFloat16>()->bits;
        for (int64_t i = b; i < e; ++i) y[i] = half::bf16_to_float(x[i]);
      } else {
#ifdef ADA_HAVE_FLOAT16
        const _Float16* x = reinterpret_cast<const _Float16*>(src.data<Half>());
#pragma omp simd
        for (int64_t i = b; i < e; ++i) y[i] = static_cast<float>(x[i]);
#else
        const uint16_t* x = &src.data<Half>()->bits;
        for (int64_t i = b; i < e; ++i) y[i] = half::f16_to_float(x[i]);
#endif
      }
    }
  });
}

}  // namespace ada::cpu
