// Max-, average- and global-average pooling on NCHW (max-pool on channels-last NHWC too),
// parallel over (n, c) planes.
// Max-pool records the flat argmax in each input plane (i32) so backward is a scatter; ties go
// to the first maximum in row-major window order, as PyTorch does.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/backend/cpu/cpu_common.h"
#include "core/backend/cpu/cpu_ops.h"
#include "core/ops.h"

namespace ada::cpu {
Tensor max_pool2d_forward(const Tensor& x, const Pool2dParams& p, Tensor& indices) {
  require_cpu_f32("max_pool2d_forward", {&x});
  Shape os = ops::pool2d_output_shape(x.shape(), p);
  Tensor y = Tensor::empty(os);
  indices = Tensor::empty(os, DType::i32);
  const int64_t H = x.size(2), W = x.size(3), P = os[2], Q = os[3];
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  int32_t* ip = indices.data<int32_t>();
  // The first maximum, or the first NaN, of a window. Branch-free, with bit masks: which element
  // wins is data-dependent, and the compiler turns plain selects back into branches that
  // mispredict about once per window (they made this op as slow as LeNet's convolutions).
  auto take = [](float v, int64_t at, float& best, int64_t& arg) {
    const bool t = (v > best) | ((v != v) & (best == best));
    const uint32_t m = 0u - static_cast<uint32_t>(t);
    uint32_t vb, bb;
    std::memcpy(&vb, &v, 4);
    std::memcpy(&bb, &best, 4);
    bb = (vb & m) | (bb & ~m);
    std::memcpy(&best, &bb, 4);
    const int64_t m64 = -static_cast<int64_t>(t);
    arg = (at & m64) | (arg & ~m64);
  };
  const int64_t kh = p.kernel_h, kw = p.kernel_w, sh = p.stride_h, sw = p.stride_w, ph = p.pad_h,
                pw = p.pad_w;
  const bool unpadded = ph == 0 && pw == 0;  // then every window lies inside the plane
  // Length of one column phase of a padded input row: outputs 0..Q-1 read phase entries from
  // -pw / sw (floor) to Q - 1 + (kw - 1 - pw) / sw.
  const int64_t L = Q + pw + (kw - 1) / sw + 1;
  parallel_for(0, os[0] * os[1], 1, [=](int64_t b, int64_t e) {
    std::vector<float> phases;
    if (!(unpadded && kh == 2 && kw == 2)) phases.resize(static_cast<size_t>(sw * L));
    for (int64_t plane = b; plane < e; ++plane) {
      const float* xs = xp + plane * H * W;
      float* yo = yp + plane * P * Q;
      int32_t* io = ip + plane * P * Q;
      if (unpadded && kh == 2 && kw == 2) {  // LeNet's 2x2: the window unrolled
        for (int64_t i = 0; i < P; ++i) {
          const int64_t r0 = i * sh * W, r1 = r0 + W;
          for (int64_t j = 0; j < Q; ++j) {
            const int64_t c = j * sw;
            float best = xs[r0 + c];
            int64_t arg = r0 + c;
            take(xs[r0 + c + 1], r0 + c + 1, best, arg);
            take(xs[r1 + c], r1 + c, best, arg);
            take(xs[r1 + c + 1], r1 + c + 1, best, arg);
            yo[i * Q + j] = best;
            io[i * Q + j] = static_cast<int32_t>(arg);
          }
        }
        continue;
      }
      // Any other window, a whole output row at a time: for each window element in row-major
      // order, one pass over the row's outputs (independent lanes, so it vectorises), reading
      // the input row split into its `sw` column phases with -inf in the padding, so that
      // output j's element sits at j in a phase.
      for (int64_t i = 0; i < P; ++i) {
        const int64_t h0 = std::max<int64_t>(i * sh - ph, 0), h1 = std::min(i * sh - ph + kh, H);
        float* best = yo + i * Q;
        int32_t* arg = io + i * Q;
        for (int64_t j = 0; j < Q; ++j) {
          best[j] = -std::numeric_limits<float>::infinity();
          arg[j] = static_cast<int32_t>(h0 * W + std::max<int64_t>(j * sw - pw, 0));
        }
        for (int64_t h = h0; h < h1; ++h) {
          const float* row = xs + h * W;
          for (int64_t r = 0; r < sw; ++r)
            for (int64_t k = -pw; k < L - pw; ++k) {
              const int64_t col = k * sw + r;
              phases[r * L + k + pw] =
                  col >= 0 && col < W ? row[col] : -std::numeric_limits<float>::infinity();
            }
          for (int64_t dw = 0; dw < kw; ++dw) {
            const int64_t d = dw - pw, r = ((d % sw) + sw) % sw, q = (d - r) / sw;
            const float* src = phases.data() + r * L + pw + q;
            const int32_t at0 = static_cast<int32_t>(h * W + d);
            const int32_t step = static_cast<int32_t>(sw);
            for (int64_t j = 0; j < Q; ++j) {
              const float v = src[j], b = best[j];
              const bool t = (v > b) | ((v != v) & (b == b));
              best[j] = t ? v : b;
              arg[j] = t ? at0 + step * static_cast<int32_t>(j) : arg[j];
            }
          }
        }
      }
    }
  });
  return y;
}

namespace {
// A max-pool backward's arguments: f32 dy on the CPU, i32 indices of its shape, and an input
// shape with dy's batch and channel counts (channels in dim cd: 1 for NCHW, 3 for NHWC).
void check_max_pool_backward(const char* op, const Tensor& dy, const Tensor& indices,
                             const Shape& x_shape, int cd) {
  require_cpu_f32(op, {&dy});
  check_dtype(indices, DType::i32, op, "indices");
  check_same_shape(dy, indices, op);
  ADA_CHECK_ARG(x_shape.size() == 4 && dy.dim() == 4 && dy.size(0) == x_shape[0] &&
                    dy.size(cd) == x_shape[cd],
                ShapeError)
      << op << ": gradient " << dy.str() << " does not match input " << shape_str(x_shape);
}
}  // namespace

Tensor max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Shape& x_shape) {
  check_max_pool_backward("max_pool2d_backward", dy, indices, x_shape, 1);
  Tensor dx = Tensor::zeros(x_shape);
  const int64_t HW = x_shape[2] * x_shape[3], PQ = dy.size(2) * dy.size(3);
  const float* gp = dy.data<float>();
  const int32_t* ip = indices.data<int32_t>();
  float* dxp = dx.data<float>();
  parallel_for(0, dy.size(0) * dy.size(1), 1, [&](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane)
      for (int64_t o = 0; o < PQ; ++o) dxp[plane * HW + ip[plane * PQ + o]] += gp[plane * PQ + o];
  });
  return dx;
}

// Channels-last: each output (n, i, j, c) takes its window's first maximum (or first NaN) in
// row-major order from -inf, with the window's first element as the index otherwise, as the
// NCHW op's general path; the channels of a pixel are independent lanes (vectorised).
Tensor max_pool2d_nhwc_forward(const Tensor& x, const Pool2dParams& p, Tensor& indices) {
  require_cpu_f32("max_pool2d_nhwc_forward", {&x});
  const int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  const Shape nchw = ops::pool2d_output_shape({N, C, H, W}, p);
  const int64_t P = nchw[2], Q = nchw[3];
  Tensor y = Tensor::empty({N, P, Q, C});
  indices = Tensor::empty({N, P, Q, C}, DType::i32);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  int32_t* ip = indices.data<int32_t>();
  const int64_t kh = p.kernel_h, kw = p.kernel_w, sh = p.stride_h, sw = p.stride_w, ph = p.pad_h,
                pw = p.pad_w;
  parallel_for(0, N * P, 1, [=](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      const int64_t n = row / P, i = row % P;
      const int64_t h0 = std::max<int64_t>(i * sh - ph, 0), h1 = std::min(i * sh - ph + kh, H);
      for (int64_t j = 0; j < Q; ++j) {
        const int64_t w0 = std::max<int64_t>(j * sw - pw, 0), w1 = std::min(j * sw - pw + kw, W);
        float* best = yp + (row * Q + j) * C;
        int32_t* arg = ip + (row * Q + j) * C;
        for (int64_t c = 0; c < C; ++c) {
          best[c] = -std::numeric_limits<float>::infinity();
          arg[c] = static_cast<int32_t>(h0 * W + w0);
        }
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) {
            const float* xs = xp + ((n * H + h) * W + w) * C;
            const int32_t at = static_cast<int32_t>(h * W + w);
            for (int64_t c = 0; c < C; ++c) {
              const float v = xs[c], bv = best[c];
              const bool t = (v > bv) | ((v != v) & (bv == bv));
              best[c] = t ? v : bv;
              arg[c] = t ? at : arg[c];
            }
          }
      }
    }
  });
  return y;
}

// Each channel's plane adds its outputs in order, as the NCHW op: the same sums, bit for bit.
Tensor max_pool2d_nhwc_backward(const Tensor& dy, const Tensor& indices, const Shape& x_shape) {
  check_max_pool_backward("max_pool2d_nhwc_backward", dy, indices, x_shape, 3);
  Tensor dx = Tensor::zeros(x_shape);
  const int64_t C = x_shape[3], HW = x_shape[1] * x_shape[2], PQ = dy.size(1) * dy.size(2);
  const float* gp = dy.data<float>();
  const int32_t* ip = indices.data<int32_t>();
  float* dxp = dx.data<float>();
  parallel_for(0, x_shape[0] * C, 1, [&](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane) {
      const int64_t n = plane / C, c = plane % C;
      for (int64_t o = 0; o < PQ; ++o) {
        const int64_t at = (n * PQ + o) * C + c;
        dxp[(n * HW + ip[at]) * C + c] += gp[at];
      }
    }
  });
  return dx;
}

Tensor avg_pool2d_forward(const Tensor& x, const Pool2dParams& p) {
  require_cpu_f32("avg_pool2d_forward", {&x});
  Shape os = ops::pool2d_output_shape(x.shape(), p);
  Tensor y = Tensor::empty(os);
  const int64_t H = x.size(2), W = x.size(3), P = os[2], Q = os[3];
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  parallel_for(0, os[0] * os[1], 1, [&](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane) {
      const float* xs = xp + plane * H * W;
      for (int64_t i = 0; i < P; ++i)
        for (int64_t j = 0; j < Q; ++j) {
          int64_t h0 = i * p.stride_h - p.pad_h, w0 = j * p.stride_w - p.pad_w;
          int64_t h1 = std::min<int64_t>(h0 + p.kernel_h, H + p.pad_h);
          int64_t w1 = std::min<int64_t>(w0 + p.kernel_w, W + p.pad_w);
          int64_t div_full = (h1 - h0) * (w1 - w0);
          h0 = std::max<int64_t>(h0, 0);
          w0 = std::max<int64_t>(w0, 0);
          h1 = std::min(h1, H);
          w1 = std::min(w1, W);
          float s = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) s += xs[h * W + w];
          int64_t div = p.count_include_pad ? div_full : (h1 - h0) * (w1 - w0);
          yp[plane * P * Q + i * Q + j] = s / static_cast<float>(div);
        }
    }
  });
  return y;
}

Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2dParams& p) {
  require_cpu_f32("avg_pool2d_backward", {&dy});
  Shape os = ops::pool2d_output_shape(x_shape, p);
  ADA_CHECK_ARG(dy.shape() == os, ShapeError)
      << "avg_pool2d_backward: gradient " << dy.str() << " should be " << shape_str(os);
  Tensor dx = Tensor::zeros(x_shape);
  const int64_t H = x_shape[2], W = x_shape[3], P = os[2], Q = os[3];
  const float* gp = dy.data<float>();
  float* dxp = dx.data<float>();
  parallel_for(0, os[0] * os[1], 1, [&](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane) {
      float* ds = dxp + plane * H * W;
      for (int64_t i = 0; i < P; ++i)
        for (int64_t j = 0; j < Q; ++j) {
          int64_t h0 = i * p.stride_h - p.pad_h, w0 = j * p.stride_w - p.pad_w;
          int64_t h1 = std::min<int64_t>(h0 + p.kernel_h, H + p.pad_h);
          int64_t w1 = std::min<int64_t>(w0 + p.kernel_w, W + p.pad_w);
          int64_t div_full = (h1 - h0) * (w1 - w0);
          h0 = std::max<int64_t>(h0, 0);
          w0 = std::max<int64_t>(w0, 0);
          h1 = std::min(h1, H);
          w1 = std::min(w1, W);
          int64_t div = p.count_include_pad ? div_full : (h1 - h0) * (w1 - w0);
          float g = gp[plane * P * Q + i * Q + j] / static_cast<float>(div);
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) ds[h * W + w] += g;
        }
    }
  });
  return dx;
}

Tensor global_avg_pool_forward(const Tensor& x) {
  require_cpu_f32("global_avg_pool_forward", {&x});
  check_dim(x, 4, "global_avg_pool_forward", "x");
  const int64_t planes = x.size(0) * x.size(1), HW = x.size(2) * x.size(3);
  ADA_CHECK_ARG(HW > 0, ShapeError) << "global_avg_pool_forward: empty spatial size in " << x.str();
  Tensor y = Tensor::empty({x.size(0), x.size(1)});
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  parallel_for(0, planes, 16, [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; ++pl) {
      double s = 0;
      for (int64_t i = 0; i < HW; ++i) s += xp[pl * HW + i];
      yp[pl] = static_cast<float>(s / static_cast<double>(HW));
    }
  });
  return y;
}

Tensor global_avg_pool_backward(const Tensor& dy, const Shape& x_shape) {
  require_cpu_f32("global_avg_pool_backward", {&dy});
  ADA_CHECK_ARG(x_shape.size() == 4 && dy.shape() == Shape({x_shape[0], x_shape[1]}), ShapeError)
      << "global_avg_pool_backward: gradient " << dy.str() << " does not match input "
      << shape_str(x_shape);
  Tensor dx = Tensor::empty(x_shape);
  const int64_t planes = x_shape[0] * x_shape[1], HW = x_shape[2] * x_shape[3];
  const float* gp = dy.data<float>();
  float* dxp = dx.data<float>();
  parallel_for(0, planes, 16, [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; ++pl) std::fill(dxp + pl * HW, dxp + (pl + 1) * HW, gp[pl] / HW);
  });
  return dx;
}

}  // namespace ada::cpu
