// Image transforms for JPEG data sets, fused into one decode + resample pass per image:
// training = random-resized-crop (torchvision's sampling rule) + horizontal flip + normalise;
// eval = resize (shorter side) + centre crop + normalise. Resampling is separable, antialiased
// bilinear (triangle filter widened by the downscale factor, as PIL/torchvision antialias).
// Random choices come from the example's Generator, so they depend only on (seed, epoch, index).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"
#include "data/jpeg.h"

namespace ada::data {

struct ImageTransformOptions {
  bool train = true;
  int64_t crop_size = 224;    // output is [3, crop_size, crop_size]
  int64_t resize_size = 256;  // eval: shorter side resized to this, then the centre crop
  double scale_min = 0.08, scale_max = 1.0;              // train: crop area / image area
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;   // train: crop width / height
  bool hflip = true;                                     // train: flip with probability 1/2
  std::array<float, 3> mean = {0.485f, 0.456f, 0.406f};  // of x/255, per RGB channel
  std::array<float, 3> std = {0.229f, 0.224f, 0.225f};
  // Decode at 1/2, 1/4 or 1/8 scale in the DCT when the crop keeps at least the output size
  // (and only the crop's rows/columns). Much faster on large photos; pixels differ slightly
  // from a full-size decode. Either way the result is deterministic.
  bool fast_decode = true;
};

// A rectangle in source pixel coordinates (x, y: top-left corner; may be fractional).
struct CropBox {
  double x = 0, y = 0, w = 0, h = 0;
};

// torchvision RandomResizedCrop.get_params: up to 10 tries of area ~ U(scale) x image area and
// log-aspect ~ U(log ratio); first that fits wins (integer box, uniform position); otherwise the
// centre crop clamped to the ratio range. Reads counters [first, first + 40) of `gen`'s stream.
CropBox random_resized_crop_box(int64_t height, int64_t width, const Generator& gen,
                                const ImageTransformOptions& opt);
// The source rectangle that "resize shorter side to resize_size, centre crop crop_size" shows.
CropBox center_crop_box(int64_t height, int64_t width, const ImageTransformOptions& opt);

// Resamples `box` (in the coordinates of the full image that `src` is a region of; see
// Image::x0/y0) to out_h x out_w, reading no pixel outside `bounds`, mirrored if hflip, then
// (v/255 - mean[c]) / std[c]. Returns f32 [3, out_h, out_w].
Tensor resample_to_tensor(const Image& src, const CropBox& box, const CropBox& bounds,
                          int64_t out_h, int64_t out_w, bool hflip,
                          const std::array<float, 3>& mean, const std::array<float, 3>& std);

// Decode + transform of one JPEG file's bytes; `name` names the file in errors. `gen` is the
// example's generator (example_generator(seed, epoch, index)); eval ignores it.
Tensor transform_jpeg(const std::vector<uint8_t>& bytes, const std::string& name,
                      const ImageTransformOptions& opt, const Generator& gen);

}  // namespace ada::data
