// CUDA fused optimizer updates of core/ops.h (the Adam family): one elementwise pass reading
// w, g, m, v once each. Constants are formed in double on the host and applied in f32 in the
// operation order of core/backend/cpu/optim.cc (PyTorch's), whose checks are mirrored here.
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "core/backend/cuda/cuda_common.h"
#include "core/backend/cuda/cuda_ops.h"
#include "core/backend/op_shapes.h"

namespace ada::cuda {
namespace {

// Returns the device of w, g, m, v after the CPU backend's checks.
int check_adam(const char* op, const Tensor& w, const Tensor& g, const Tensor& m, const Tensor& v,
               const AdamArgs& a) {
  const int dev = require_f32(op, {&w, &g, &m, &v});
  backend::check_adam_args(op, w, g, m, v, a);
  return dev;
}

using backend::adam_consts;
using backend::AdamConsts;

__device__ __forceinline__ int64_t global_tid() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t global_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// Updates m and v in place from g' = g (+ l2*w) and returns the denominator
// d = sqrt(v) / sqrt(1 - beta2^t) + eps, with w the value before this step's update.
__device__ __forceinline__ float adam_moments(const AdamConsts& c, bool add_l2, float w, float g,
                                              float& m, float& v) {
  const float gp = add_l2 ? g + c.l2 * w : g;
  m = m * c.b1 + c.omb1 * gp;
  v = v * c.b2 + c.omb2 * gp * gp;
  return sqrtf(v) / c.b2_sqrt + c.eps;
}

// w = w*w_scale + neg_step*m/d.
__global__ void adam_update_kernel(float* w, const float* g, float* m, float* v, int64_t n,
                                   AdamConsts c, bool add_l2, float neg_step, float w_scale) {
  for (int64_t i = global_tid(); i < n; i += global_stride()) {
    const float wi = w[i];
    float mi = m[i], vi = v[i];
    const float d = adam_moments(c, add_l2, wi, g[i], mi, vi);
    m[i] = mi;
    v[i] = vi;
    w[i] = wi * w_scale + neg_step * mi / d;
  }
}

// u = inv_bias1*m/d + lambda*w.
__global__ void adam_direction_kernel(float* u, const float* w, const float* g, float* m, float* v,
                                      int64_t n, AdamConsts c, bool add_l2, float inv_bias1,
                                      float lambda) {
  for (int64_t i = global_tid(); i < n; i += global_stride()) {
    const float wi = w[i];
    float mi = m[i], vi = v[i];
    const float d = adam_moments(c, add_l2, wi, g[i], mi, vi);
    m[i] = mi;
    v[i] = vi;
    u[i] = inv_bias1 * mi / d + lambda * wi;
  }
}

}  // namespace

void adam_update_(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, const AdamArgs& a, double lr,
                  double decoupled_decay) {
  const int dev = check_adam("adam_update_", w, g, m, v, a);
  const AdamConsts c = adam_consts(a);
  const float neg_step = static_cast<float>(-(lr / c.bias1));
  const float w_scale = static_cast<float>(1.0 - lr * decoupled_decay);
  const bool add_l2 = a.l2 != 0.0;
  const int64_t n = w.numel();
  if (n == 0) return;
  adam_update_kernel<<<blocks_for(n), kThreads, 0, stream(dev)>>>(w.data<float>(), g.data<float>(),
                                                                  m.data<float>(), v.data<float>(),
                                                                  n, c, add_l2, neg_step, w_scale);
  ADA_CUDA_LAUNCH_CHECK();
}

void adam_direction_(Tensor& u, const Tensor& w, const Tensor& g, Tensor& m, Tensor& v,
                     const AdamArgs& a, double decay) {
  check_adam("adam_direction_", w, g, m, v, a);
  const int dev = require_f32("adam_direction_", {&u, &w});
  check_same_shape(w, u, "adam_direction_");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&w, &g, &m, &v})
    ADA_CHECK_ARG(!u.shares_storage_with(*t), InternalError)
        << "adam_direction_: the output u must not share storage with w, g, m or v";
  const AdamConsts c = adam_consts(a);
  const float inv_bias1 = static_cast<float>(1.0 / c.bias1);
  const float lambda = static_cast<float>(decay);
  const bool add_l2 = a.l2 != 0.0;
  const int64_t n = w.numel();
  if (n == 0) return;
  adam_direction_kernel<<<blocks_for(n), kThreads, 0, stream(dev)>>>(
      u.data<float>(), w.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(), n, c,
      add_l2, inv_bias1, lambda);
  ADA_CUDA_LAUNCH_CHECK();
}

}  // namespace ada::cuda
