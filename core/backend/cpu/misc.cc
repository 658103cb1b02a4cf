// Dropout (counter-based, so the mask depends only on the generator state) and embedding
// gather / scatter-add.
#include <cstring>

#include "core/backend/cpu/cpu_common.h"
#include "core/backend/cpu/cpu_ops.h"
#include "core/ops.h"
#include "core/philox.h"

namespace ada::cpu {

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
  // The Philox stream inlined (core/philox.h, the same function the CUDA kernel calls, so a seed
  // gives the same masks on both backends), so the loop over blocks of four vectorises.
  const int64_t blocks = n / 4;
  // Element i from its uniform u.
  auto keep = [](int64_t i, float u, float p, float scale, const float* x, float* mask, float* y) {
    const float m = u >= p ? scale : 0.f;
    if constexpr (kMask) mask[i] = m;
    y[i] = x[i] * m;
  };
  parallel_for(0, blocks, kGrain / 4, [&](int64_t b, int64_t e) {
    const uint64_t s = seed, f = first;  // locals: the vectoriser does not hoist closure loads
    const float pp = p, scale = keep_scale;
    const float* x = xp;
    float* mask = mp;
    float* y = yp;
#pragma omp simd
    for (int64_t j = b; j < e; ++j) {
      const Uniform4 u = philox_uniform4_at(s, f, static_cast<uint64_t>(j));
      keep(4 * j, u.u0, pp, scale, x, mask, y);
      keep(4 * j + 1, u.u1, pp, scale, x, mask, y);
      keep(4 * j + 2, u.u2, pp, scale, x, mask, y);
      keep(4 * j + 3, u.u3, pp, scale, x, mask, y);
    }
  });
  if (n % 4) {  // the last, partial block
    const Uniform4 u = philox_uniform4_at(seed, first, static_cast<uint64_t>(blocks));
    const float us[4] = {u.u0, u.u1, u.u2, u.u3};
    for (int64_t i = 4 * blocks; i < n; ++i) keep(i, us[i - 4 * blocks], p, keep_scale, xp, mp, yp);
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
