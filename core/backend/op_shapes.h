// Argument checks and derived quantities that the CPU and CUDA backends compute identically
// (and word for word the same messages): reduction axes, permutations, GEMM dimensions,
// convolution and batch-norm geometry, Adam's argument checks and constants. Each op checks its
// tensors' device first, then calls these.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/ops.h"
#include "core/tensor.h"

#if defined(__CUDACC__)
#define ADA_SHARED_HD __host__ __device__
#else
#define ADA_SHARED_HD
#endif

namespace ada::backend {

// ---- reductions and permutations --------------------------------------------------------------
// Normalises axes (negative from the end), checks them, returns a per-dim "reduced" mask.
inline std::vector<bool> reduced_mask(const Shape& s, const std::vector<int>& axes,
                                      const char* op) {
  const int nd = static_cast<int>(s.size());
  std::vector<bool> red(nd, false);
  for (int a : axes) {
    int ax = a < 0 ? a + nd : a;
    ADA_CHECK_ARG(ax >= 0 && ax < nd, ShapeError)
        << op << ": axis " << a << " out of range for shape " << shape_str(s);
    ADA_CHECK_ARG(!red[ax], ShapeError) << op << ": axis " << a << " given twice";
    red[ax] = true;
  }
  return red;
}
// Shape of the reduction result with keepdim (reduced dims become 1).
inline Shape kept_shape(const Shape& s, const std::vector<bool>& red) {
  Shape k = s;
  for (size_t i = 0; i < s.size(); ++i)
    if (red[i]) k[i] = 1;
  return k;
}
// Shape of the reduction result without the reduced dims.
inline Shape squeezed_shape(const Shape& s, const std::vector<bool>& red) {
  Shape k;
  for (size_t i = 0; i < s.size(); ++i)
    if (!red[i]) k.push_back(s[i]);
  return k;
}

// The shape of x permuted by perm, after checking perm is a permutation of x's dims.
inline Shape permuted_shape(const Tensor& x, const std::vector<int>& perm) {
  const int nd = static_cast<int>(x.dim());
  ADA_CHECK_ARG(static_cast<int>(perm.size()) == nd, ShapeError)
      << "permute: " << perm.size() << " axes given for " << x.str();
  std::vector<bool> seen(nd, false);
  for (int p : perm) {
    ADA_CHECK_ARG(p >= 0 && p < nd && !seen[p], ShapeError)
        << "permute: axes must be a permutation of 0.." << nd - 1;
    seen[p] = true;
  }
  Shape out(nd);
  for (int i = 0; i < nd; ++i) out[i] = x.shape()[perm[i]];
  return out;
}

// ---- GEMM ---------------------------------------------------------------------------------------
struct GemmDims {
  int64_t m, n, k;
};

inline GemmDims gemm_dims(const char* op, const Shape& a, const Shape& b, bool ta, bool tb) {
  int64_t m = ta ? a[1] : a[0], ka = ta ? a[0] : a[1];
  int64_t kb = tb ? b[1] : b[0], n = tb ? b[0] : b[1];
  ADA_CHECK_ARG(ka == kb, ShapeError)
      << op << ": inner dimensions differ: op(a) is " << m << "x" << ka << ", op(b) is " << kb
      << "x" << n << " (a " << shape_str(a) << (ta ? "^T" : "") << ", b " << shape_str(b)
      << (tb ? "^T" : "") << ")";
  return {m, n, ka};
}

// gemm's operands: a, b and c 2-d, c of shape [m, n]; matmul passes c = nullptr (a and b only).
inline GemmDims checked_gemm(const char* op, const Tensor& a, const Tensor& b, const Tensor* c,
                             bool ta, bool tb) {
  check_dim(a, 2, op, "a");
  check_dim(b, 2, op, "b");
  GemmDims d = gemm_dims(op, a.shape(), b.shape(), ta, tb);
  if (c) {
    check_dim(*c, 2, op, "c");
    ADA_CHECK_ARG(c->size(0) == d.m && c->size(1) == d.n, ShapeError)
        << op << ": output " << c->str() << " should be [" << d.m << "," << d.n << "]";
  }
  return d;
}

// gemm_batched's operands: a, b and c 3-d with one batch size, c of shape [batch, m, n].
inline GemmDims checked_gemm_batched(const char* op, const Tensor& a, const Tensor& b,
                                     const Tensor& c, bool ta, bool tb) {
  check_dim(a, 3, op, "a");
  check_dim(b, 3, op, "b");
  check_dim(c, 3, op, "c");
  const int64_t batch = a.size(0);
  ADA_CHECK_ARG(b.size(0) == batch && c.size(0) == batch, ShapeError)
      << op << ": batch sizes differ: " << a.str() << ", " << b.str() << ", " << c.str();
  GemmDims d = gemm_dims(op, {a.size(1), a.size(2)}, {b.size(1), b.size(2)}, ta, tb);
  ADA_CHECK_ARG(c.size(1) == d.m && c.size(2) == d.n, ShapeError)
      << op << ": output " << c.str() << " should be [" << batch << "," << d.m << "," << d.n << "]";
  return d;
}

// bmm's output shape [batch, m, n] (a and b 3-d; gemm_batched checks the rest).
inline Shape bmm_shape(const char* op, const Tensor& a, const Tensor& b, bool ta, bool tb) {
  check_dim(a, 3, op, "a");
  check_dim(b, 3, op, "b");
  return {a.size(0), ta ? a.size(2) : a.size(1), tb ? b.size(1) : b.size(2)};
}

// ---- convolution ------------------------------------------------------------------------------
struct ConvGeom {
  int64_t n, c, h, w;  // input
  int64_t k, r, s;     // filter
  int64_t p, q;        // output spatial
  ops::Conv2dParams prm;
  int64_t crs() const { return c * r * s; }
  int64_t pq() const { return p * q; }
  bool pointwise() const {
    return r == 1 && s == 1 && prm.stride_h == 1 && prm.stride_w == 1 && prm.pad_h == 0 &&
           prm.pad_w == 0;
  }
};

// x is [N,C,H,W], or [N,H,W,C] with p.channels_last.
inline ConvGeom make_geom(const char* op, const Shape& x, const Shape& w,
                          const ops::Conv2dParams& p) {
  ADA_CHECK_ARG(x.size() == 4, ShapeError)
      << op << ": input must be " << (p.channels_last ? "[N,H,W,C] (channels last)" : "[N,C,H,W]")
      << ", got " << shape_str(x);
  ADA_CHECK_ARG(w.size() == 4, ShapeError)
      << op << ": weight must be [Cout,Cin,kh,kw], got " << shape_str(w);
  const int cdim = p.channels_last ? 3 : 1;
  ADA_CHECK_ARG(w[1] == x[cdim], ShapeError)
      << op << ": weight " << shape_str(w) << " expects " << w[1] << " input channels, input "
      << shape_str(x) << " has " << x[cdim];
  ADA_CHECK_ARG(p.stride_h > 0 && p.stride_w > 0 && p.dil_h > 0 && p.dil_w > 0 && p.pad_h >= 0 &&
                    p.pad_w >= 0,
                ShapeError)
      << op << ": strides and dilations must be positive and paddings non-negative";
  ConvGeom g = p.channels_last ? ConvGeom{x[0], x[3], x[1], x[2], w[0], w[2], w[3], 0, 0, p}
                               : ConvGeom{x[0], x[1], x[2], x[3], w[0], w[2], w[3], 0, 0, p};
  int64_t eff_r = (g.r - 1) * p.dil_h + 1, eff_s = (g.s - 1) * p.dil_w + 1;
  int64_t hp = g.h + 2 * p.pad_h, wp = g.w + 2 * p.pad_w;
  ADA_CHECK_ARG(hp >= eff_r && wp >= eff_s, ShapeError)
      << op << ": kernel " << g.r << "x" << g.s << " (dilated " << eff_r << "x" << eff_s
      << ") is larger than the padded input " << hp << "x" << wp;
  g.p = (hp - eff_r) / p.stride_h + 1;
  g.q = (wp - eff_s) / p.stride_w + 1;
  return g;
}

// ---- batch-norm ---------------------------------------------------------------------------------
// x [n, c, inner...]: n * inner values per channel.
struct BnGeom {
  int64_t n, c, inner;
  ADA_SHARED_HD int64_t count() const { return n * inner; }
};
inline BnGeom bn_geom(const char* op, const Tensor& x, const Tensor& gamma, const Tensor& beta) {
  ADA_CHECK_ARG(x.dim() >= 2, ShapeError) << op << ": input must be [N, C, ...], got " << x.str();
  const int64_t c = x.size(1);
  ADA_CHECK_ARG(gamma.shape() == Shape{c}, ShapeError)
      << op << ": gamma " << gamma.str() << " should be [" << c << "] for input " << x.str();
  if (beta.defined()) {
    ADA_CHECK_ARG(beta.shape() == Shape{c}, ShapeError)
        << op << ": beta " << beta.str() << " should be [" << c << "] for input " << x.str();
  }
  return {x.size(0), c, c ? x.numel() / std::max<int64_t>(1, x.size(0) * c) : 0};
}

// ---- Adam ---------------------------------------------------------------------------------------
// Shapes, distinct storage, step and betas of adam_update_ / adam_direction_ (devices checked
// by the caller).
inline void check_adam_args(const char* op, const Tensor& w, const Tensor& g, const Tensor& m,
                            const Tensor& v, const ops::AdamArgs& a) {
  check_same_shape(w, g, op);
  check_same_shape(w, m, op);
  check_same_shape(w, v, op);
  // The kernels assume that no output overlaps an input: the four must not share storage.
  const Tensor* ts[] = {&w, &g, &m, &v};
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j)
      ADA_CHECK_ARG(!ts[i]->shares_storage_with(*ts[j]), InternalError)
          << op << ": w, g, m and v must be distinct tensors (arguments " << i << " and " << j
          << " share storage)";
  ADA_CHECK_ARG(a.step >= 1, InternalError) << op << ": step must be >= 1, got " << a.step;
  ADA_CHECK_ARG(a.beta1 >= 0 && a.beta1 < 1 && a.beta2 >= 0 && a.beta2 < 1, InternalError)
      << op << ": betas must lie in [0, 1), got " << a.beta1 << ", " << a.beta2;
}

// The per-element constants of both ops.
struct AdamConsts {
  float b1, omb1, b2, omb2, b2_sqrt, eps, l2;
  double bias1;  // 1 - beta1^t
};
inline AdamConsts adam_consts(const ops::AdamArgs& a) {
  const double t = static_cast<double>(a.step);
  return {static_cast<float>(a.beta1),
          static_cast<float>(1.0 - a.beta1),
          static_cast<float>(a.beta2),
          static_cast<float>(1.0 - a.beta2),
          static_cast<float>(std::sqrt(1.0 - std::pow(a.beta2, t))),
          static_cast<float>(a.eps),
          static_cast<float>(a.l2),
          1.0 - std::pow(a.beta1, t)};
}

// ---- attention_softmax: scores [B*heads, Sq, Sk], key_bias [B, Sk] (or undefined) ------------
inline void check_attention_softmax(const Tensor& scores, const Tensor& key_bias, int64_t heads) {
  ADA_CHECK_ARG(scores.dim() == 3 && heads >= 1 && scores.size(0) % heads == 0, ShapeError)
      << "attention_softmax: scores must be [batch*heads, queries, keys] with heads = " << heads
      << ", got " << scores.str();
  if (!key_bias.defined()) return;
  ADA_CHECK_ARG(key_bias.dim() == 2 && key_bias.size(0) == scores.size(0) / heads &&
                    key_bias.size(1) == scores.size(2),
                ShapeError)
      << "attention_softmax: key_bias " << key_bias.str() << " should be ["
      << scores.size(0) / heads << "," << scores.size(2) << "] for scores " << scores.str()
      << " with " << heads << " heads";
}

// ---- fused_attention: q [B, Sq, heads*D], k, v [B, Sk, heads*D], key_bias [B, Sk] ------------
inline void check_fused_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& key_bias, int64_t heads, float dropout) {
  ADA_CHECK_ARG(q.dim() == 3 && k.dim() == 3 && heads >= 1 && q.size(2) % heads == 0 &&
                    k.shape() == v.shape() && k.size(0) == q.size(0) && k.size(2) == q.size(2),
                ShapeError)
      << "fused_attention: q must be [batch, queries, heads*D] and k, v [batch, keys, heads*D] "
         "with heads = "
      << heads << ", got q " << q.str() << ", k " << k.str() << ", v " << v.str();
  ADA_CHECK_ARG(dropout >= 0.f && dropout < 1.f, ShapeError)
      << "fused_attention: dropout probability must be in [0, 1), got " << dropout;
  if (!key_bias.defined()) return;
  ADA_CHECK_ARG(
      key_bias.dim() == 2 && key_bias.size(0) == q.size(0) && key_bias.size(1) == k.size(1),
      ShapeError)
      << "fused_attention: key_bias " << key_bias.str() << " should be [" << q.size(0) << ","
      << k.size(1) << "] for keys " << k.str();
}
inline void check_fused_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& out,
                                           const Tensor& lse, int64_t heads) {
  ADA_CHECK_ARG(dout.shape() == q.shape() && out.shape() == q.shape() && lse.dim() == 2 &&
                    lse.size(0) == q.size(0) * heads && lse.size(1) == q.size(1),
                ShapeError)
      << "fused_attention_backward: dout " << dout.str() << " and out " << out.str()
      << " must be shaped as q " << q.str() << ", lse " << lse.str()
      << " as [batch*heads, queries]";
}

// ---- argmax_rows
// ---------------------------------------------------------------------------------
inline void check_argmax_rows(const Tensor& x) {
  ADA_CHECK_ARG(x.dim() == 2 && x.size(1) >= 1, ShapeError)
      << "argmax_rows: x must be [N, C] with C >= 1, got " << x.str();
}

// ---- cast_out
// ------------------------------------------------------------------------------------ One element
// count; f32 -> f32 / f16 / bf16 or f16 / bf16 -> f32.
inline void check_cast(const Tensor& src, const Tensor& dst) {
  ADA_CHECK_ARG(src.numel() == dst.numel(), ShapeError)
      << "cast_out: " << src.str() << " and " << dst.str() << " differ in element count";
  const bool half_src = src.dtype() == DType::f16 || src.dtype() == DType::bf16;
  const bool half_dst = dst.dtype() == DType::f16 || dst.dtype() == DType::bf16;
  ADA_CHECK_ARG((src.dtype() == DType::f32 && (half_dst || dst.dtype() == DType::f32)) ||
                    (half_src && dst.dtype() == DType::f32),
                DTypeError)
      << "cast_out: converts between f32 and f16/bf16, not " << dtype_name(src.dtype()) << " to "
      << dtype_name(dst.dtype());
}

// ---- Adasum's segment ops -----------------------------------------------------------------------
// a, b (and out) 1-d of one length; every segment inside it with a non-negative slot.
inline void check_segments(const char* op, const Tensor& a, const Tensor& b, const Tensor* out,
                           const std::vector<ops::Segment>& segs) {
  ADA_CHECK_ARG(a.dim() == 1 && b.dim() == 1 && a.numel() == b.numel() &&
                    (!out || (out->dim() == 1 && out->numel() == a.numel())),
                ShapeError)
      << op << ": operands must be 1-d of one length, got " << a.str() << ", " << b.str()
      << (out ? ", " + out->str() : std::string());
  for (const ops::Segment& s : segs)
    ADA_CHECK_ARG(s.off >= 0 && s.n >= 0 && s.off + s.n <= a.numel() && s.slot >= 0, ShapeError)
        << op << ": segment [" << s.off << ", " << s.off + s.n << ") slot " << s.slot
        << " outside the " << a.numel() << " elements";
}

}  // namespace ada::backend
