// Direct 3x3 and 5x5 stride-1 convolution kernels. With few channels (ResNet-20's 16-64, LeNet's
// 1-16) im2col + GEMM spends more time copying than multiplying: the im2col matrix is 9 (25)
// times the input, and with 16 output channels each packed GEMM panel feeds only two micro-tile
// rows. These kernels read a zero-padded copy of the input planes (one pass over the input) and
// keep the outputs in registers, vectorised along the output plane; conv.cc says up to which
// channel counts they are used.
//
// The seam between the driver (conv.cc, baseline ISA) and the kernels, each built in its own
// translation unit for one ISA (conv_direct_avx2.cc, conv_direct_avx512.cc) and picked at run
// time by CPUID like the GEMM kernels (core/cpu_isa.h). The kernel files include only this
// header and conv_direct_impl.h and keep everything else in an anonymous namespace (see
// gemm_kernels.h for why).
#pragma once

#include <cstdint>

namespace ada::cpu::conv_detail {

// One image's planes, as the kernels see them: flat, in the padded row length wp of the input
// (the input's width plus its padding), so that output position o = i * wp + j (row i, column j)
// reads the input at o + r * wp + s for tap (r, s), and a run of consecutive positions is a run
// of consecutive inputs. Positions with j >= the output width are computed and discarded (the
// driver compacts the rows); their share is 2 / wp of the work.
struct Plane {
  int64_t taps;    // the kernel is taps x taps: 3 or 5
  int64_t c, k;    // input and output channels
  int64_t wp;      // padded row length
  int64_t n;       // output positions per plane: rows * wp rounded up to whole vectors
  int64_t xplane;  // input plane stride: >= n + (taps - 1) * (wp + 1), zeros past the data (a
                   // multiple of lanes)
};

struct DirectKernels {
  const char* name;  // e.g. "avx512 direct"
  int64_t lanes;     // vector width: n and xplane are multiples of it
  // y[k * n + o] = sum_{c, r, s < taps} w[k, c, r, s] * x[c * xplane + o + r * wp + s] for o < n,
  // one image; w is [k, c, taps, taps].
  void (*forward)(const Plane& g, const float* x, const float* w, float* y);
  // dw[k, c, r, s] += sum over `images` images m of sum_{o < n} dy_m[k * n + o] * x_m[c * xplane +
  // o + r * wp + s], where x_m = x + m * x_stride and dy_m = dy + m * dy_stride; dy_m must be
  // zero at the discarded positions (which then multiply input values by zero: an infinite
  // input makes more of dw NaN than im2col + GEMM would, where dw is not finite anyway).
  void (*filter)(const Plane& g, int64_t images, const float* x, int64_t x_stride, const float* dy,
                 int64_t dy_stride, float* dw);
};

const DirectKernels& avx2_direct();
const DirectKernels& avx512_direct();

}  // namespace ada::cpu::conv_detail
