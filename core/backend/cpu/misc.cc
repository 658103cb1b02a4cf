// Dropout (counter-based, so the mask depends only on the generator state) and embedding
// gather / scatter-add.
#include <cstring>

#include "core/backend/cpu/cpu_common.h"
#include "core/backend/cpu/cpu_ops.h"
#include "core/backend/cpu/dropout_blocks.h"
#include "core/cpu_isa.h"
#include "core/ops.h"
#include "core/philox.h"

namespace ada::cpu {

namespace {
// dropout_blocks for the baseline ISA: the Philox stream inlined (core/philox.h), so the loop
// over blocks vectorises; kX: y = x * m, kMask: mask = m.
template <bool kX, bool kMask>
void blocks_baseline(uint64_t seed, uint64_t first, uint64_t j0, int64_t blocks, float p,
                     float scale, const float* x, float* y, float* mask) {
  auto keep = [](int64_t i, float u, float p, float scale, const float* x, float* y, float* mask) {
    const float m = u >= p ? scale : 0.f;
    if constexpr (kMask) mask[i] = m;
    if constexpr (kX) y[i] = x[i] * m;
  };
#pragma omp simd
  for (int64_t t = 0; t < blocks; ++t) {
    const Uniform4 u = philox_uniform4_at(seed, first, j0 + static_cast<uint64_t>(t));
    keep(4 * t, u.u0, p, scale, x, y, mask);
    keep(4 * t + 1, u.u1, p, scale, x, y, mask);
    keep(4 * t + 2, u.u2, p, scale, x, y, mask);
    keep(4 * t + 3, u.u3, p, scale, x, y, mask);
  }
}
}  // namespace

void dropout_blocks(uint64_t seed, uint64_t first, uint64_t j0, int64_t blocks, float p,
                    float scale, const float* x, float* y, float* mask) {
  if (isa() >= Isa::avx512 && blocks >= 16) {
    const int64_t wide = blocks / 16 * 16;
    dropout_detail::blocks_avx512(seed, first, j0, wide, p, scale, x, y, mask);
    j0 += static_cast<uint64_t>(wide);
    blocks -= wide;
    if (x) x += 4 * wide, y += 4 * wide;
    if (mask) mask += 4 * wide;
  }
  if (x && mask)
    blocks_baseline<true, true>(seed, first, j0, blocks, p, scale, x, y, mask);
  else if (x)
    blocks_baseline<true, false>(seed, first, j0, blocks, p, scale, x, y, mask);
  else if (mask)
    blocks_baseline<false, true>(seed, first, j0, blocks, p, scale, x, y, mask);
}

namespace {
// y = x * mask for the stream at (seed, first); the mask also written when kMask.
template <bool kMask>
Tensor dropout_impl(const char* op, const Tensor& x, float p, uint64_t seed, uint64_t first,
                    Tensor* mask_out) {
  require_cpu_f32(op, {&x});
  ADA_CHECK_ARG(p >= 0.f && p < 1.f, ShapeError)
      << "dropout: probability must be in [0, 1), got " << p;
  const int64_t n = x.numel();
  Tensor y = Tensor::empty(x.shape());
  if constexpr (kMask) *mask_out = Tensor::empty(x.shape());
  const float keep_scale = 1.f / (1.f - p);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  float* mp = kMask ? mask_out->data<float>() : nullptr;
  const int64_t blocks = n / 4;
  parallel_for(0, blocks, kGrain / 4, [&](int64_t b, int64_t e) {
    dropout_blocks(seed, first, static_cast<uint64_t>(b), e - b, p, keep_scale, xp + 4 * b,
                   yp + 4 * b, mp ? mp + 4 * b : nullptr);
  });
  if (n % 4) {  // the last, partial block
    float m[4];
    dropout_blocks(seed, first, static_cast<uint64_t>(blocks), 1, p, keep_scale, nullptr, nullptr,
                   m);
    for (int64_t i = 4 * blocks; i < n; ++i) {
      if (mp) mp[i] = m[i - 4 * blocks];
      yp[i] = xp[i] * m[i - 4 * blocks];
    }
  }
  return y;
}
}  // namespace

Tensor dropout_forward(const Tensor& x, float p, Generator& gen, Tensor& mask) {
  const uint64_t seed = gen.seed(), first = gen.take(static_cast<uint64_t>(x.numel()));
  return dropout_impl<true>("dropout_forward", x, p, seed, first, &mask);
}

Tensor dropout_apply(const Tensor& x, float p, uint64_t seed, uint64_t first) {
  return dropout_impl<false>("dropout_apply", x, p, seed, first, nullptr);
}

Tensor attention_key_bias(const Tensor& mask) {
  ADA_CHECK_ARG(mask.defined() && mask.device().is_cpu(), DeviceError)
      << "attention_key_bias: the mask must be a CPU tensor here";
  const DType t = mask.dtype();
  ADA_CHECK_ARG(t == DType::f32 || t == DType::i64 || t == DType::i32, DTypeError)
      << "attention_key_bias: the mask must be f32, i64 or i32, got " << mask.str();
  Tensor bias = Tensor::empty(mask.shape());
  float* bp = bias.data<float>();
  for (int64_t i = 0; i < mask.numel(); ++i) {
    const bool keep = t == DType::f32   ? mask.data<float>()[i] != 0.f
                      : t == DType::i64 ? mask.data<int64_t>()[i] != 0
                                        : mask.data<int32_t>()[i] != 0;
    bp[i] = keep ? 0.f : -10000.f;
  }
  return bias;
}

Tensor embedding_forward(const Tensor& weight, const Tensor& ids) {
  require_cpu_f32("embedding_forward", {&weight});
  require_index("embedding_forward", ids, "ids");
  check_dim(weight, 2, "embedding_forward", "weight");
  const int64_t v = weight.size(0), d = weight.size(1), n = ids.numel();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = index_at(ids, i);
    ADA_CHECK_ARG(id >= 0 && id < v, ShapeError) << "embedding: id " << id << " at position " << i
                                                 << " is outside the vocabulary [0, " << v << ")";
  }
  Shape os = ids.shape();
  os.push_back(d);
  Tensor y = Tensor::empty(os);
  const float* wp = weight.data<float>();
  float* yp = y.data<float>();
  parallel_for(0, n, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      std::memcpy(yp + i * d, wp + index_at(ids, i) * d, sizeof(float) * d);
  });
  return y;
}

void embedding_backward(const Tensor& dy, const Tensor& ids, Tensor& dweight) {
  require_cpu_f32("embedding_backward", {&dy, &dweight});
  require_index("embedding_backward", ids, "ids");
  check_dim(dweight, 2, "embedding_backward", "dweight");
  const int64_t v = dweight.size(0), d = dweight.size(1), n = ids.numel();
  ADA_CHECK_ARG(dy.numel() == n * d, ShapeError)
      << "embedding_backward: gradient " << dy.str() << " does not match ids " << ids.str()
      << " and width " << d;
  const float* gp = dy.data<float>();
  float* wp = dweight.data<float>();
  // Parallel over the embedding width: each thread owns a column slice, rows stay in order, so
  // repeated ids add up deterministically without atomics.
  parallel_for(0, d, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t id = index_at(ids, i);
      ADA_CHECK_ARG(id >= 0 && id < v, ShapeError)
          << "embedding_backward: id " << id << " outside [0, " << v << ")";
      float* row = wp + id * d;
      const float* g = gp + i * d;
      for (int64_t j = b; j < e; ++j) row[j] += g[j];
    }
  });
}

}  // namespace ada::cpu
