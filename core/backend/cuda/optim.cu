// CUDA fused optimizer updates of core/ops.h: the Adam family's per-tensor passes (reading w, g,
// m, v once each) and the multi-tensor steps, which update every parameter of a step in a fixed
// number of launches. Constants are formed in double on the host and applied in f32 in the
// operation order of the CPU definitions (core/backend/cpu/optim.cc, core/ops.cc; PyTorch's),
// whose checks are mirrored here.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/backend/cuda/cuda_common.h"
#include "core/backend/cuda/cuda_ops.h"
#include "core/backend/cuda/kernel_util.cuh"
#include "core/backend/cuda/multi_tensor.cuh"
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
  refuse_in_capture(dev, "an Adam update",
                    "its bias corrections are host values that change every step; a replay would "
                    "repeat the capture's");
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
  refuse_in_capture(dev, "a LAMB/Adam direction",
                    "its bias corrections are host values that change every step; a replay would "
                    "repeat the capture's");
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

// ---- multi-tensor steps (the launch tables of multi_tensor.cuh) -------------------------------
namespace {
using multi::Chunk;
using multi::chunk_end;
using multi::chunks_of;
using multi::DeviceTable;
using multi::FloatDesc;
using multi::grid_of;

// y = alpha*x + beta*y as the axpby_ kernel forms it.
__device__ __forceinline__ float axpby(float alpha, float x, float beta, float y) {
  return beta == 1.f ? y + alpha * x : alpha * x + beta * y;
}

// The per-entry device index after the checks of `op` on `ts`; every entry on the first's device.
int entry_device(const char* op, std::initializer_list<const Tensor*> ts, int& dev, size_t i) {
  const int d = require_f32(op, ts);
  if (i == 0) dev = d;
  ADA_CHECK_ARG(d == dev, DeviceError)
      << op << ": entry " << i << " is on cuda:" << d << " but entry 0 on cuda:" << dev
      << "; every parameter of one step must be on one device";
  return d;
}

// entry_device and check_adam_args for an Adam-family entry; returns its AdamConsts.
AdamConsts check_moments_entry(const char* op, const ops::MomentsEntry& e, int& dev, size_t i) {
  entry_device(op, {&e.w, &e.g, &e.m, &e.v}, dev, i);
  backend::check_adam_args(op, e.w, e.g, e.m, e.v, e.args);
  return adam_consts(e.args);
}

struct SgdDesc {
  float* w;
  const float* g;
  float* v;
  int64_t n;
  float weight_decay, keep, v_beta;  // v_beta: 0 on the first update, else momentum
};

__global__ void sgd_step_kernel(const SgdDesc* descs, const Chunk* chunks, float lr, float mu,
                                float neg_lr_mu, bool nesterov) {
  const Chunk c = chunks[blockIdx.x];
  const SgdDesc t = descs[c.t];
  const int64_t end = chunk_end(c, t.n);
  for (int64_t i = c.begin + threadIdx.x; i < end; i += blockDim.x) {
    const float g = t.g[i];
    float w = t.w[i];
    if (mu == 0.f) {
      t.w[i] = axpby(-lr, g, t.keep, w);
      continue;
    }
    float v = axpby(1.f, g, t.v_beta, t.v[i]);
    if (t.weight_decay != 0.f) v = axpby(t.weight_decay, w, 1.f, v);
    t.v[i] = v;
    if (!nesterov) {
      w = axpby(-lr, v, 1.f, w);
    } else {
      w = axpby(-lr, g, t.keep, w);
      w = axpby(neg_lr_mu, v, 1.f, w);
    }
    t.w[i] = w;
  }
}

struct AdamDesc {
  float* w;
  const float* g;
  float* m;
  float* v;
  int64_t n;
  AdamConsts c;
  float neg_step, w_scale;
  int add_l2;
};

__global__ void adam_step_kernel(const AdamDesc* descs, const Chunk* chunks) {
  const Chunk c = chunks[blockIdx.x];
  const AdamDesc t = descs[c.t];
  const int64_t end = chunk_end(c, t.n);
  for (int64_t i = c.begin + threadIdx.x; i < end; i += blockDim.x) {
    const float wi = t.w[i];
    float mi = t.m[i], vi = t.v[i];
    const float d = adam_moments(t.c, t.add_l2 != 0, wi, t.g[i], mi, vi);
    t.m[i] = mi;
    t.v[i] = vi;
    t.w[i] = wi * t.w_scale + t.neg_step * mi / d;
  }
}

struct LambDesc {
  float* w;
  const float* g;
  float* m;
  float* v;
  int64_t n;
  AdamConsts c;
  float inv_bias1, lambda;
  int add_l2, adapt;
  int32_t first_chunk, num_chunks;
  int64_t ratio_slot;
};

// u = inv_bias1*m/d + lambda*w from the updated moments (adam_direction_'s expression).
__device__ __forceinline__ float lamb_direction(const LambDesc& t, float w, float m, float v) {
  return t.inv_bias1 * m / (sqrtf(v) / t.c.b2_sqrt + t.c.eps) + t.lambda * w;
}

// Updates the moments and writes the chunk's sums of w^2 and u^2 to partials[2*chunk + 0, 1].
__global__ void lamb_moments_kernel(const LambDesc* descs, const Chunk* chunks, double* partials) {
  __shared__ double sh[33];
  const Chunk c = chunks[blockIdx.x];
  const LambDesc t = descs[c.t];
  const int64_t end = chunk_end(c, t.n);
  double sw = 0.0, su = 0.0;
  for (int64_t i = c.begin + threadIdx.x; i < end; i += blockDim.x) {
    const float wi = t.w[i];
    float mi = t.m[i], vi = t.v[i];
    adam_moments(t.c, t.add_l2 != 0, wi, t.g[i], mi, vi);
    t.m[i] = mi;
    t.v[i] = vi;
    const float u = lamb_direction(t, wi, mi, vi);
    sw += static_cast<double>(wi) * wi;
    su += static_cast<double>(u) * u;
  }
  sw = kernel::block_sum(sw, sh);
  su = kernel::block_sum(su, sh);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = sw;
    partials[2 * blockIdx.x + 1] = su;
  }
}

// Every block of a tensor sums that tensor's partials in the same order, forms the trust ratio and
// applies w += (-lr*ratio)*u over its chunk; the tensor's first block records the ratio.
__global__ void lamb_apply_kernel(const LambDesc* descs, const Chunk* chunks,
                                  const double* partials, float lr, float* ratios) {
  __shared__ double sh[33];
  const Chunk c = chunks[blockIdx.x];
  const LambDesc t = descs[c.t];
  double ratio = 1.0;
  if (t.adapt) {
    double sw = 0.0, su = 0.0;
    for (int k = threadIdx.x; k < t.num_chunks; k += blockDim.x) {
      sw += partials[2 * (t.first_chunk + k)];
      su += partials[2 * (t.first_chunk + k) + 1];
    }
    sw = kernel::block_sum(sw, sh);
    su = kernel::block_sum(su, sh);
    const double wn = sqrt(sw), un = sqrt(su);
    if (wn > 0 && un > 0) ratio = wn / un;
  }
  const float alpha = static_cast<float>(-static_cast<double>(lr) * ratio);
  const int64_t end = chunk_end(c, t.n);
  for (int64_t i = c.begin + threadIdx.x; i < end; i += blockDim.x) {
    const float wi = t.w[i];
    t.w[i] = axpby(alpha, lamb_direction(t, wi, t.m[i], t.v[i]), 1.f, wi);
  }
  if (c.index == 0 && threadIdx.x == 0) ratios[t.ratio_slot] = static_cast<float>(ratio);
}

__global__ void sum_squares_kernel(const FloatDesc* descs, const Chunk* chunks, double* partials) {
  __shared__ double sh[33];
  const Chunk c = chunks[blockIdx.x];
  const FloatDesc t = descs[c.t];
  const int64_t end = chunk_end(c, t.n);
  double s = 0.0;
  for (int64_t i = c.begin + threadIdx.x; i < end; i += blockDim.x)
    s += static_cast<double>(t.p[i]) * t.p[i];
  s = kernel::block_sum(s, sh);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// One block: the global norm from the partials, and the factor (1: leave the gradients alone).
__global__ void clip_coef_kernel(const double* partials, int num, double max_norm, float* coef) {
  __shared__ double sh[33];
  double s = 0.0;
  for (int k = threadIdx.x; k < num; k += blockDim.x) s += partials[k];
  s = kernel::block_sum(s, sh);
  if (threadIdx.x == 0) {
    const double norm = sqrt(s);
    *coef = isfinite(norm) && norm > max_norm ? static_cast<float>(max_norm / (norm + 1e-6)) : 1.f;
  }
}

__global__ void clip_scale_kernel(const FloatDesc* descs, const Chunk* chunks, const float* coef) {
  const float k = *coef;
  if (k == 1.f) return;
  const Chunk c = chunks[blockIdx.x];
  const FloatDesc t = descs[c.t];
  const int64_t end = chunk_end(c, t.n);
  for (int64_t i = c.begin + threadIdx.x; i < end; i += blockDim.x) t.p[i] *= k;
}

}  // namespace

void sgd_step_(const std::vector<ops::SgdEntry>& entries, float lr, float momentum, bool nesterov) {
  if (entries.empty()) return;
  int dev = 0;
  std::vector<SgdDesc> descs;
  std::vector<int64_t> sizes;
  descs.reserve(entries.size());
  sizes.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const ops::SgdEntry& e = entries[i];
    if (momentum != 0.f) {
      entry_device("sgd_step_", {&e.w, &e.g, &e.v}, dev, i);
      check_same_shape(e.w, e.v, "sgd_step_");
    } else {
      entry_device("sgd_step_", {&e.w, &e.g}, dev, i);
    }
    check_same_shape(e.w, e.g, "sgd_step_");
    const float keep = static_cast<float>(1.0 - static_cast<double>(lr) * e.weight_decay);
    descs.push_back({e.w.data<float>(), e.g.data<float>(),
                     momentum != 0.f ? e.v.data<float>() : nullptr, e.w.numel(), e.weight_decay,
                     keep, e.first ? 0.f : momentum});
    sizes.push_back(e.w.numel());
  }
  for (const ops::SgdEntry& e : entries)
    if (e.first && momentum != 0.f)
      refuse_in_capture(dev, "an SGD step with a parameter's first update",
                        "the first update starts the momentum, later ones add to it; a replay "
                        "would start it again (step eagerly once before capturing)");
  const std::vector<Chunk> chunks = chunks_of(sizes, nullptr);
  if (chunks.empty()) return;
  DeviceTable<SgdDesc> table(descs, chunks, dev);
  sgd_step_kernel<<<grid_of(chunks), kThreads, 0, stream(dev)>>>(
      table.descs(), table.chunks(), lr, momentum, -lr * momentum, nesterov);
  ADA_CUDA_LAUNCH_CHECK();
}

void adam_step_(const std::vector<ops::AdamEntry>& entries, double lr) {
  if (entries.empty()) return;
  int dev = 0;
  std::vector<AdamDesc> descs;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < entries.size(); ++i) {
    const ops::AdamEntry& e = entries[i];
    const AdamConsts c = check_moments_entry("adam_step_", e, dev, i);
    descs.push_back({e.w.data<float>(), e.g.data<float>(), e.m.data<float>(), e.v.data<float>(),
                     e.w.numel(), c, static_cast<float>(-(lr / c.bias1)),
                     static_cast<float>(1.0 - lr * e.decoupled_decay), e.args.l2 != 0.0 ? 1 : 0});
    sizes.push_back(e.w.numel());
  }
  refuse_in_capture(dev, "an Adam step",
                    "its bias corrections are host values that change every step; a replay would "
                    "repeat the capture's");
  const std::vector<Chunk> chunks = chunks_of(sizes, nullptr);
  if (chunks.empty()) return;
  DeviceTable<AdamDesc> table(descs, chunks, dev);
  adam_step_kernel<<<grid_of(chunks), kThreads, 0, stream(dev)>>>(table.descs(), table.chunks());
  ADA_CUDA_LAUNCH_CHECK();
}

void lamb_step_(const std::vector<ops::LambEntry>& entries, float lr, Tensor& ratios) {
  if (entries.empty()) return;
  int dev = 0;
  std::vector<LambDesc> descs;
  std::vector<int64_t> sizes;
  std::vector<AdamConsts> consts;
  for (size_t i = 0; i < entries.size(); ++i) {
    consts.push_back(check_moments_entry("lamb_step_", entries[i], dev, i));
    sizes.push_back(entries[i].w.numel());
  }
  ADA_CHECK_ARG(require_f32("lamb_step_", {&ratios}) == dev && ratios.dim() == 1, DeviceError)
      << "lamb_step_: ratios must be 1-d on the entries' device cuda:" << dev << ", got "
      << ratios.str();
  std::vector<int32_t> first;
  const std::vector<Chunk> chunks = chunks_of(sizes, &first);
  for (size_t i = 0; i < entries.size(); ++i) {
    const ops::LambEntry& e = entries[i];
    ADA_CHECK_ARG(e.ratio_slot >= 0 && e.ratio_slot < ratios.numel(), ShapeError)
        << "lamb_step_: ratio_slot " << e.ratio_slot << " outside ratios " << ratios.str();
    const AdamConsts& c = consts[i];
    const int32_t last =
        i + 1 < entries.size() ? first[i + 1] : static_cast<int32_t>(chunks.size());
    descs.push_back({e.w.data<float>(), e.g.data<float>(), e.m.data<float>(), e.v.data<float>(),
                     e.w.numel(), c, static_cast<float>(1.0 / c.bias1), static_cast<float>(e.decay),
                     e.args.l2 != 0.0 ? 1 : 0, e.adapt ? 1 : 0, first[i], last - first[i],
                     e.ratio_slot});
  }
  refuse_in_capture(dev, "a LAMB step",
                    "its bias corrections are host values that change every step; a replay would "
                    "repeat the capture's");
  if (chunks.empty()) return;
  DeviceTable<LambDesc> table(descs, chunks, dev);
  Scratch partials(2 * chunks.size() * sizeof(double), dev);
  cudaStream_t s = stream(dev);
  lamb_moments_kernel<<<grid_of(chunks), kThreads, 0, s>>>(table.descs(), table.chunks(),
                                                           partials.as<double>());
  ADA_CUDA_LAUNCH_CHECK();
  lamb_apply_kernel<<<grid_of(chunks), kThreads, 0, s>>>(
      table.descs(), table.chunks(), partials.as<double>(), lr, ratios.data<float>());
  ADA_CUDA_LAUNCH_CHECK();
}

void clip_grad_norm_(const std::vector<Tensor>& grads, double max_norm) {
  if (grads.empty()) return;
  int dev = 0;
  std::vector<FloatDesc> descs;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < grads.size(); ++i) {
    entry_device("clip_grad_norm_", {&grads[i]}, dev, i);
    descs.push_back({grads[i].data<float>(), grads[i].numel()});
    sizes.push_back(grads[i].numel());
  }
  const std::vector<Chunk> chunks = chunks_of(sizes, nullptr);
  if (chunks.empty()) return;
  DeviceTable<FloatDesc> table(descs, chunks, dev);
  Scratch partials(chunks.size() * sizeof(double) + sizeof(float), dev);
  double* sums = partials.as<double>();
  float* coef = reinterpret_cast<float*>(sums + chunks.size());
  cudaStream_t s = stream(dev);
  sum_squares_kernel<<<grid_of(chunks), kThreads, 0, s>>>(table.descs(), table.chunks(), sums);
  ADA_CUDA_LAUNCH_CHECK();
  clip_coef_kernel<<<1, kThreads, 0, s>>>(sums, static_cast<int>(chunks.size()), max_norm, coef);
  ADA_CUDA_LAUNCH_CHECK();
  clip_scale_kernel<<<grid_of(chunks), kThreads, 0, s>>>(table.descs(), table.chunks(), coef);
  ADA_CUDA_LAUNCH_CHECK();
}

}  // namespace ada::cuda
