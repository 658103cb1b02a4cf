// Adasum's arithmetic on the CPU (core/ops.h: segment_partial_sums, segment_combine): one
// vectorised pass per segment; the simd reductions keep a fixed order for a given build.
#include "core/backend/cpu/cpu_common.h"
#include "core/backend/cpu/cpu_ops.h"
#include "core/backend/op_shapes.h"
#include "core/ops.h"

namespace ada::cpu {

void segment_partial_sums(const Tensor& a, const Tensor& b, const std::vector<Segment>& segs,
                          double* sums) {
  require_cpu_f32("segment_partial_sums", {&a, &b});
  backend::check_segments("segment_partial_sums", a, b, nullptr, segs);
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  for (const Segment& s : segs) {
    const float* x = pa + s.off;
    const float* y = pb + s.off;
    double d = 0, xx = 0, yy = 0;
#pragma omp simd reduction(+ : d, xx, yy)
    for (int64_t i = 0; i < s.n; ++i) {
      const double xi = x[i], yi = y[i];
      d += xi * yi;
      xx += xi * xi;
      yy += yi * yi;
    }
    sums[3 * s.slot] += d;
    sums[3 * s.slot + 1] += xx;
    sums[3 * s.slot + 2] += yy;
  }
}

void segment_combine(const Tensor& a, const Tensor& b, Tensor& out,
                     const std::vector<Segment>& segs, const double* coef) {
  require_cpu_f32("segment_combine", {&a, &b, &out});
  backend::check_segments("segment_combine", a, b, &out, segs);
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  for (const Segment& s : segs) {
    const double ca = coef[2 * s.slot], cb = coef[2 * s.slot + 1];
    const float* x = pa + s.off;
    const float* y = pb + s.off;
    float* o = po + s.off;
    if (cb == 0) {
#pragma omp simd
      for (int64_t i = 0; i < s.n; ++i) o[i] = static_cast<float>(ca * x[i]);
    } else {
#pragma omp simd
      for (int64_t i = 0; i < s.n; ++i) o[i] = static_cast<float>(ca * x[i] + cb * y[i]);
    }
  }
}

}  // namespace ada::cpu
