// Batch-blocked direct 3x3 convolution kernels: `lanes` images side by side in every vector
// (image l of a block in lane l), so that a plane of any size, and a stride of 2, costs no vector
// lanes: the plane kernels of conv_direct.h vectorise along a row of the output and lose a
// quarter of their lanes on 7x7 planes (the row padding and the rounding to whole vectors) and
// cannot take a stride. Here every load is one aligned vector, the filter gradient sums images
// in the lanes (one horizontal sum per weight and block, not per image), and the forward kernel
// runs at the GEMM's rate on ResNet-20's planes (250-270 GFLOP/s on one AVX-512 Zen 5 core).
// The price is a transposition of the images into and out of the layout (to_blocked,
// from_blocked), one pass over each operand; conv.cc chooses these kernels where that pays.
//
// A block's tensors: x[c][hp * wp][lanes] (each plane zero-padded to hp x wp), y and dy
// [k][p * q][lanes] (unpadded). Like conv_direct.h, the seam between the driver (conv.cc) and
// the kernels built per ISA in conv_direct_avx2.cc and conv_direct_avx512.cc.
#pragma once

#include <cstdint>

namespace ada::cpu::conv_detail {

struct Blocked {
  int64_t stride;  // 1 or 2 (both directions)
  int64_t c, k;    // input and output channels
  int64_t hp, wp;  // the padded input plane: rows, columns
  int64_t p, q;    // the output plane
};

struct BlockedKernels {
  const char* name;  // e.g. "avx512 blocked"
  int64_t lanes;     // images per block
  // out = w [k, c, 3, 3] in the forward kernel's order (k * c * 9 floats).
  void (*pack)(const Blocked& g, const float* w, float* out);
  // y[k][i * q + j][l] = sum_{c, r, s} w[k, c, r, s] * x[c][(i * stride + r) * wp + j * stride +
  // s][l]; wpk from pack.
  void (*forward)(const Blocked& g, const float* x, const float* wpk, float* y);
  // dw[k, c, r, s] += sum_{i, j, l} dy[k][i * q + j][l] * x[c][(i * stride + r) * wp + j * stride +
  // s][l].
  void (*filter)(const Blocked& g, const float* x, const float* dy, float* dw);
  // Writes the planes [0, planes) of `images` (<= lanes) images (image l at src + l *
  // image_stride, planes of h x w floats) into dst[plane][(i + ph) * wp + j + pw][l] with wp = w +
  // 2 pw and planes of (h + 2 ph) * wp vectors, rounded to bf16 when r16, and zeros in the
  // padding and in the lanes from `images` on.
  void (*to_blocked)(const float* src, int64_t images, int64_t image_stride, int64_t planes,
                     int64_t h, int64_t w, int64_t ph, int64_t pw, bool r16, float* dst);
  // The inverse for unpadded planes of n floats: image l (< images) of src[plane][n][lanes] to
  // dst + l * image_stride, planes of n floats.
  void (*from_blocked)(const float* src, int64_t images, int64_t planes, int64_t n, float* dst,
                       int64_t image_stride);
};

const BlockedKernels& avx2_blocked();
const BlockedKernels& avx512_blocked();

// The bf16 mode's forward kernel on AVX512_BF16 (conv_blocked_bf16.cc): input channels in pairs,
// lane l of a 32-bit lane holding bf16(x[2c'][.][l]) in its low half and bf16(x[2c' + 1][.][l])
// in its high half (zero past the last channel), and vdpbf16ps against the broadcast weight
// pair adds both products to the fp32 accumulator: half the multiply-add instructions of the
// fp32 kernel on bf16-rounded operands, which it equals up to the order of the additions.
// Layouts as above with channel pairs for channels; y is the fp32 kernels'.
struct BlockedBf16Kernels {
  const char* name;
  // out = w [k, c, 3, 3] as bf16 pairs in the forward kernel's order (k * ceil(c / 2) * 9).
  void (*pack)(const Blocked& g, const float* w, uint32_t* out);
  void (*forward)(const Blocked& g, const uint32_t* x, const uint32_t* wpk, float* y);
  // to_blocked with channel pairs: dst[pair][(i + ph) * wp + j + pw][l], 16 lanes.
  void (*to_blocked)(const float* src, int64_t images, int64_t image_stride, int64_t planes,
                     int64_t h, int64_t w, int64_t ph, int64_t pw, uint32_t* dst);
};

const BlockedBf16Kernels& avx512_bf16_blocked();

}  // namespace ada::cpu::conv_detail
