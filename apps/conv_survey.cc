// conv_survey: how accurately each cuDNN convolution algorithm computes with 16-bit tensors and
// an fp32 compute type, the evidence behind core/backend/cuda/conv.cc's fit() rules. For six
// shapes (3x3, 1x1 and 7x7 kernels, strides 1 and 2), bf16 and fp16, NCHW and NHWC, it runs
// every forward, backward-data and backward-filter algorithm in every math type cuDNN accepts
// and compares the 16-bit result with a double-precision reference of the same 16-bit inputs.
// Each element's error is divided by what 16-bit tensors with fp32 sums allow: one rounding of
// the result to the 16-bit type plus an fp32 summation bound, n * 2^-24 * sum |products| for n
// products (the bound a correctly rounded sum stays within whatever the order). A ratio over 1
// means the algorithm rounds inside (partial sums in the 16-bit type). One line per direction
// lists the heuristic's order (algo/math) as Adatrain asks for it, then each algorithm's worst
// ratio over math types. Needs a GPU:
//   conv_survey            (tools/gpu_test.sh convsurvey on a lent GPU machine)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {

float widen(uint16_t b, bool bf) {
  if (bf) {
    const uint32_t u = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  __half_raw r;
  r.x = b;
  return __half2float(__half(r));
}

uint16_t narrow(float f, bool bf) {
  uint16_t u;
  if (bf) {
    const __nv_bfloat16 h = __float2bfloat16(f);
    std::memcpy(&u, &h, 2);
  } else {
    const __half h = __float2half(f);
    std::memcpy(&u, &h, 2);
  }
  return u;
}

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "conv_survey: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

struct Shape {
  int n, c, h, w, k, r, s, pad, stride;
};

// A 4-d tensor's element (i, j, y, z) of dims [a, b, c, d] in NCHW order or, with nhwc, at the
// NHWC position of the same logical element.
size_t at(bool nhwc, int i, int j, int y, int z, int b, int c, int d) {
  return nhwc ? ((size_t(i) * c + y) * d + z) * b + j : ((size_t(i) * b + j) * c + y) * d + z;
}

// Returns the number of (direction, algorithm) pairs over the bound.
int survey(const Shape& s, bool bf, bool nhwc, cudnnHandle_t h) {
  const int p_out = (s.h + 2 * s.pad - s.r) / s.stride + 1;
  const int q_out = (s.w + 2 * s.pad - s.s) / s.stride + 1;
  std::printf("== %s %s x [%d,%d,%d,%d] w [%d,%d,%d,%d] pad %d stride %d\n", bf ? "bf16" : "fp16",
              nhwc ? "NHWC" : "NCHW", s.n, s.c, s.h, s.w, s.k, s.c, s.r, s.s, s.pad, s.stride);
  std::mt19937 gen(7);
  std::normal_distribution<float> normal;
  // Logical NCHW values, already rounded to the 16-bit type.
  std::vector<float> x(size_t(s.n) * s.c * s.h * s.w), w(size_t(s.k) * s.c * s.r * s.s),
      dy(size_t(s.n) * s.k * p_out * q_out);
  for (auto* v : {&x, &w, &dy})
    for (float& e : *v) e = widen(narrow(normal(gen), bf), bf);
  // Reference results and sums of |products| of the three directions, in double.
  std::vector<double> ry(dy.size()), ay(dy.size()), rx(x.size()), ax(x.size()), rw(w.size()),
      aw(w.size());
  for (int n = 0; n < s.n; ++n)
    for (int k = 0; k < s.k; ++k)
      for (int p = 0; p < p_out; ++p)
        for (int q = 0; q < q_out; ++q)
          for (int c = 0; c < s.c; ++c)
            for (int r = 0; r < s.r; ++r)
              for (int t = 0; t < s.s; ++t) {
                const int iy = p * s.stride - s.pad + r, ix = q * s.stride - s.pad + t;
                if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
                const size_t xi = at(false, n, c, iy, ix, s.c, s.h, s.w),
                             wi = at(false, k, c, r, t, s.c, s.r, s.s),
                             yi = at(false, n, k, p, q, s.k, p_out, q_out);
                const double xw = double(x[xi]) * w[wi], gw = double(dy[yi]) * w[wi],
                             gx = double(dy[yi]) * x[xi];
                ry[yi] += xw, ay[yi] += std::fabs(xw);
                rx[xi] += gw, ax[xi] += std::fabs(gw);
                rw[wi] += gx, aw[wi] += std::fabs(gx);
              }
  auto pack = [&](const std::vector<float>& v, int a, int b, int c, int d) {
    std::vector<uint16_t> o(v.size());
    for (int i = 0; i < a; ++i)
      for (int j = 0; j < b; ++j)
        for (int y = 0; y < c; ++y)
          for (int z = 0; z < d; ++z)
            o[at(nhwc, i, j, y, z, b, c, d)] = narrow(v[at(false, i, j, y, z, b, c, d)], bf);
    return o;
  };
  const std::vector<uint16_t> hx = pack(x, s.n, s.c, s.h, s.w), hw = pack(w, s.k, s.c, s.r, s.s),
                              hdy = pack(dy, s.n, s.k, p_out, q_out);
  const size_t kWorkspace = size_t(512) << 20;
  void *dx = nullptr, *dw = nullptr, *ddy = nullptr, *out = nullptr, *ws = nullptr;
  if (!ok(cudaMalloc(&dx, hx.size() * 2), "cudaMalloc") ||
      !ok(cudaMalloc(&dw, hw.size() * 2), "cudaMalloc") ||
      !ok(cudaMalloc(&ddy, hdy.size() * 2), "cudaMalloc") ||
      !ok(cudaMalloc(&out, std::max({hx.size(), hw.size(), hdy.size()}) * 2), "cudaMalloc") ||
      !ok(cudaMalloc(&ws, kWorkspace), "cudaMalloc"))
    return 1;
  cudaMemcpy(dx, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dw, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(ddy, hdy.data(), hdy.size() * 2, cudaMemcpyHostToDevice);
  const cudnnDataType_t dt = bf ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  const cudnnTensorFormat_t fmt = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  cudnnCreateTensorDescriptor(&xd);
  cudnnCreateTensorDescriptor(&yd);
  cudnnCreateFilterDescriptor(&wd);
  cudnnCreateConvolutionDescriptor(&cd);
  cudnnSetTensor4dDescriptor(xd, fmt, dt, s.n, s.c, s.h, s.w);
  cudnnSetTensor4dDescriptor(yd, fmt, dt, s.n, s.k, p_out, q_out);
  cudnnSetFilter4dDescriptor(wd, dt, fmt, s.k, s.c, s.r, s.s);
  cudnnSetConvolution2dDescriptor(cd, s.pad, s.pad, s.stride, s.stride, 1, 1,
                                  CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
  const double unit = bf ? 0x1p-8 : 0x1p-11;  // half an ulp, relative
  int over_count = 0;
  for (int dir = 0; dir < 3; ++dir) {
    static const char* const kName[] = {"forward", "backward-data", "backward-filter"};
    // The heuristic's order under the math type Adatrain's 16-bit plans set (conv.cc).
    cudnnSetConvolutionMathType(cd,
                                bf ? CUDNN_TENSOR_OP_MATH : CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
    std::printf(" %-15s heuristic (algo/math):", kName[dir]);
    int got = 0;
    auto show = [&](const auto* perf) {
      for (int i = 0; i < got; ++i)
        if (perf[i].status == CUDNN_STATUS_SUCCESS)
          std::printf(" %d/%d", int(perf[i].algo), int(perf[i].mathType));
    };
    if (dir == 0) {
      cudnnConvolutionFwdAlgoPerf_t perf[16];
      cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, 16, &got, perf);
      show(perf);
    } else if (dir == 1) {
      cudnnConvolutionBwdDataAlgoPerf_t perf[16];
      cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wd, yd, cd, xd, 16, &got, perf);
      show(perf);
    } else {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[16];
      cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, xd, yd, cd, wd, 16, &got, perf);
      show(perf);
    }
    std::printf("\n %-15s worst error / bound:", "");
    const std::vector<double>& ref = dir == 0 ? ry : dir == 1 ? rx : rw;
    const std::vector<double>& abs_sum = dir == 0 ? ay : dir == 1 ? ax : aw;
    const double products = dir == 0   ? double(s.c) * s.r * s.s
                            : dir == 1 ? double(s.k) * s.r * s.s
                                       : double(s.n) * p_out * q_out;
    const int d0 = dir == 2 ? s.k : s.n, d1 = dir == 0 ? s.k : s.c,
              d2 = dir == 0   ? p_out
                   : dir == 1 ? s.h
                              : s.r,
              d3 = dir == 0   ? q_out
                   : dir == 1 ? s.w
                              : s.s;
    for (int a = 0; a < 8; ++a) {
      double worst = -1;
      for (int m = 0; m < 4; ++m) {  // CUDNN_DEFAULT_MATH .. CUDNN_FMA_MATH
        cudnnSetConvolutionMathType(cd, cudnnMathType_t(m));
        size_t need = 0;
        cudnnStatus_t st;
        const float one = 1.f, zero = 0.f;
        if (dir == 0) {
          const auto algo = cudnnConvolutionFwdAlgo_t(a);
          st = cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, algo, &need);
          if (st != CUDNN_STATUS_SUCCESS || need > kWorkspace) continue;
          st = cudnnConvolutionForward(h, &one, xd, dx, wd, dw, cd, algo, ws, need, &zero, yd, out);
        } else if (dir == 1) {
          const auto algo = cudnnConvolutionBwdDataAlgo_t(a);
          st = cudnnGetConvolutionBackwardDataWorkspaceSize(h, wd, yd, cd, xd, algo, &need);
          if (st != CUDNN_STATUS_SUCCESS || need > kWorkspace) continue;
          st = cudnnConvolutionBackwardData(h, &one, wd, dw, yd, ddy, cd, algo, ws, need, &zero, xd,
                                            out);
        } else {
          const auto algo = cudnnConvolutionBwdFilterAlgo_t(a);
          st = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, xd, yd, cd, wd, algo, &need);
          if (st != CUDNN_STATUS_SUCCESS || need > kWorkspace) continue;
          st = cudnnConvolutionBackwardFilter(h, &one, xd, dx, yd, ddy, cd, algo, ws, need, &zero,
                                              wd, out);
        }
        if (st != CUDNN_STATUS_SUCCESS) continue;
        std::vector<uint16_t> got16(ref.size());
        if (!ok(cudaMemcpy(got16.data(), out, got16.size() * 2, cudaMemcpyDeviceToHost), "copy"))
          return 1;
        for (int i = 0; i < d0; ++i)
          for (int j = 0; j < d1; ++j)
            for (int y = 0; y < d2; ++y)
              for (int z = 0; z < d3; ++z) {
                const size_t li = at(false, i, j, y, z, d1, d2, d3);
                const double err =
                    std::fabs(widen(got16[at(nhwc, i, j, y, z, d1, d2, d3)], bf) - ref[li]);
                const double bound =
                    unit * std::fabs(ref[li]) + products * 0x1p-24 * abs_sum[li] + 1e-30;
                worst = std::max(worst, err / bound);
              }
      }
      if (worst < 0) continue;  // not supported in any math type
      std::printf(" %d: %.2f%s", a, worst, worst > 1 ? " OVER" : "");
      over_count += worst > 1;
    }
    std::printf("\n");
  }
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyFilterDescriptor(wd);
  cudnnDestroyConvolutionDescriptor(cd);
  cudaFree(dx), cudaFree(dw), cudaFree(ddy), cudaFree(out), cudaFree(ws);
  return over_count;
}

}  // namespace

int main() {
  cudnnHandle_t h;
  if (cudnnCreate(&h) != CUDNN_STATUS_SUCCESS) {
    std::fprintf(stderr, "conv_survey: cudnnCreate failed (no GPU?)\n");
    return 2;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf(
      "conv_survey: cuDNN %zu on %s; per algorithm, its worst error over math types in "
      "units of (16-bit rounding + fp32 summation bound); OVER: rounds inside\n",
      cudnnGetVersion(), prop.name);
  const std::vector<Shape> shapes = {
      {4, 8, 13, 13, 16, 3, 3, 1, 1},   {8, 64, 14, 14, 64, 3, 3, 1, 1},
      {8, 64, 28, 28, 128, 1, 1, 0, 2}, {4, 3, 32, 32, 16, 7, 7, 3, 2},
      {8, 256, 7, 7, 64, 1, 1, 0, 1},   {8, 32, 28, 28, 32, 3, 3, 1, 2}};
  int over = 0;
  for (const Shape& s : shapes)
    for (bool bf : {false, true})
      for (bool nhwc : {false, true}) over += survey(s, bf, nhwc, h);
  std::printf("conv_survey: %d (shape, type, layout, direction, algorithm) cases over the bound\n",
              over);
  cudnnDestroy(h);
  return 0;
}
