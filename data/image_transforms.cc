#include "data/image_transforms.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace ada::data {

namespace {

double uniform(const Generator& gen, uint64_t i) {
  return Generator::uniform_at(gen.seed(), gen.offset(), i);
}

// torch.randint(0, n) from a uniform in [0, 1).
int64_t randint(double u, int64_t n) {
  return std::min<int64_t>(static_cast<int64_t>(u * n), n - 1);
}

// Taps of a 1-D resample: out[o] = sum_k weight[o][k] * in[first[o] + k] (absolute coordinates).
struct Taps {
  std::vector<int64_t> first, count;
  std::vector<float> weight;  // max_taps per output
  int64_t max_taps = 0;
};

Taps make_taps(double start, double len, int64_t out, int64_t lo, int64_t hi) {
  Taps t;
  const double scale = len / static_cast<double>(out);
  const double fs = std::max(scale, 1.0);  // filter scale: widen the triangle when shrinking
  t.max_taps = static_cast<int64_t>(std::ceil(fs)) * 2 + 2;
  t.first.resize(out);
  t.count.resize(out);
  t.weight.assign(static_cast<size_t>(out * t.max_taps), 0.f);
  for (int64_t o = 0; o < out; ++o) {
    const double center = start + (static_cast<double>(o) + 0.5) * scale;
    int64_t a = std::max<int64_t>(static_cast<int64_t>(std::floor(center - fs)), lo);
    int64_t b = std::min<int64_t>(static_cast<int64_t>(std::ceil(center + fs)), hi);  // exclusive
    if (b - a > t.max_taps) b = a + t.max_taps;
    float* w = &t.weight[static_cast<size_t>(o * t.max_taps)];
    double sum = 0;
    for (int64_t j = a; j < b; ++j) {
      double d = std::abs((static_cast<double>(j) + 0.5 - center) / fs);
      double v = d < 1.0 ? 1.0 - d : 0.0;
      w[j - a] = static_cast<float>(v);
      sum += v;
    }
    if (sum <= 0) {  // box smaller than a pixel at the edge: take the nearest pixel
      a = std::clamp<int64_t>(static_cast<int64_t>(std::floor(center)), lo, hi - 1);
      b = a + 1;
      w[0] = 1.f;
      sum = 1;
    }
    for (int64_t j = 0; j < b - a; ++j) w[j] = static_cast<float>(w[j] / sum);
    t.first[o] = a;
    t.count[o] = b - a;
  }
  return t;
}

}  // namespace

CropBox random_resized_crop_box(int64_t height, int64_t width, const Generator& gen,
                                const ImageTransformOptions& opt) {
  const double area = static_cast<double>(height) * static_cast<double>(width);
  const double log_r0 = std::log(opt.ratio_min), log_r1 = std::log(opt.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const uint64_t c = 4 * static_cast<uint64_t>(attempt);
    double target = area * (opt.scale_min + (opt.scale_max - opt.scale_min) * uniform(gen, c));
    double aspect = std::exp(log_r0 + (log_r1 - log_r0) * uniform(gen, c + 1));
    auto w = static_cast<int64_t>(std::lround(std::sqrt(target * aspect)));
    auto h = static_cast<int64_t>(std::lround(std::sqrt(target / aspect)));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      int64_t y = randint(uniform(gen, c + 2), height - h + 1);
      int64_t x = randint(uniform(gen, c + 3), width - w + 1);
      return {double(x), double(y), double(w), double(h)};
    }
  }
  // Fallback: centre crop with the ratio clamped into range.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < opt.ratio_min) {
    h = std::lround(static_cast<double>(w) / opt.ratio_min);
  } else if (in_ratio > opt.ratio_max) {
    w = std::lround(static_cast<double>(h) * opt.ratio_max);
  }
  return {double((width - w) / 2), double((height - h) / 2), double(w), double(h)};
}

CropBox center_crop_box(int64_t height, int64_t width, const ImageTransformOptions& opt) {
  // torchvision Resize(int): the shorter side becomes resize_size, the other int(size *
  // long/short).
  int64_t rh, rw;
  if (width <= height) {
    rw = opt.resize_size;
    rh = static_cast<int64_t>(static_cast<double>(opt.resize_size) * height / width);
  } else {
    rh = opt.resize_size;
    rw = static_cast<int64_t>(static_cast<double>(opt.resize_size) * width / height);
  }
  // CenterCrop: top = int(round((rh - crop) / 2)), Python's round (halves to even).
  double top = std::nearbyint((rh - opt.crop_size) / 2.0);
  double left = std::nearbyint((rw - opt.crop_size) / 2.0);
  double sy = static_cast<double>(height) / rh, sx = static_cast<double>(width) / rw;
  return {left * sx, top * sy, opt.crop_size * sx, opt.crop_size * sy};
}

Tensor resample_to_tensor(const Image& src, const CropBox& box, const CropBox& bounds,
                          int64_t out_h, int64_t out_w, bool hflip,
                          const std::array<float, 3>& mean, const std::array<float, 3>& std) {
  ADA_CHECK_ARG(src.channels == 3, ShapeError)
      << "resample_to_tensor: " << src.channels << " channels; expected RGB";
  ADA_CHECK_ARG(out_h > 0 && out_w > 0, ConfigError)
      << "resample_to_tensor: output size " << out_h << "x" << out_w << " must be positive";
  // Readable pixel range: `bounds` intersected with the decoded region.
  const int64_t bx0 = std::max<int64_t>(static_cast<int64_t>(std::floor(bounds.x)), src.x0);
  const int64_t by0 = std::max<int64_t>(static_cast<int64_t>(std::floor(bounds.y)), src.y0);
  const int64_t bx1 =
      std::min<int64_t>(static_cast<int64_t>(std::ceil(bounds.x + bounds.w)), src.x0 + src.width);
  const int64_t by1 =
      std::min<int64_t>(static_cast<int64_t>(std::ceil(bounds.y + bounds.h)), src.y0 + src.height);
  ADA_CHECK(bx1 > bx0 && by1 > by0) << "empty readable region";
  const Taps tx = make_taps(box.x, box.w, out_w, bx0, bx1);
  const Taps ty = make_taps(box.y, box.h, out_h, by0, by1);
  int64_t row_lo = ty.first[0], row_hi = 0;
  for (int64_t o = 0; o < out_h; ++o) {
    row_lo = std::min(row_lo, ty.first[o]);
    row_hi = std::max(row_hi, ty.first[o] + ty.count[o]);
  }
  // Horizontal pass over the rows the vertical taps need: tmp[row][x][c].
  const int64_t rows = row_hi - row_lo;
  std::vector<float> tmp(static_cast<size_t>(rows * out_w * 3));
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* in = src.pixels.data() + ((r + row_lo - src.y0) * src.width) * 3;
    float* t = tmp.data() + r * out_w * 3;
    for (int64_t o = 0; o < out_w; ++o) {
      const float* w = &tx.weight[static_cast<size_t>(o * tx.max_taps)];
      const uint8_t* p = in + (tx.first[o] - src.x0) * 3;
      float a0 = 0, a1 = 0, a2 = 0;
      for (int64_t k = 0; k < tx.count[o]; ++k) {
        a0 += w[k] * p[3 * k];
        a1 += w[k] * p[3 * k + 1];
        a2 += w[k] * p[3 * k + 2];
      }
      const int64_t ox = hflip ? out_w - 1 - o : o;
      t[ox * 3] = a0;
      t[ox * 3 + 1] = a1;
      t[ox * 3 + 2] = a2;
    }
  }
  // Vertical pass + normalisation into [3, out_h, out_w].
  Tensor out = Tensor::empty({3, out_h, out_w});
  float* dst = out.data<float>();
  const int64_t plane = out_h * out_w;
  float sc[3], sh[3];
  for (int c = 0; c < 3; ++c) {
    sc[c] = 1.f / (255.f * std[c]);
    sh[c] = -mean[c] / std[c];
  }
  std::vector<float> acc(static_cast<size_t>(out_w * 3));
  for (int64_t y = 0; y < out_h; ++y) {
    std::fill(acc.begin(), acc.end(), 0.f);
    const float* w = &ty.weight[static_cast<size_t>(y * ty.max_taps)];
    for (int64_t k = 0; k < ty.count[y]; ++k) {
      const float* t = tmp.data() + (ty.first[y] + k - row_lo) * out_w * 3;
      const float wk = w[k];
      for (int64_t i = 0; i < out_w * 3; ++i) acc[i] += wk * t[i];
    }
    for (int c = 0; c < 3; ++c) {
      float* d = dst + c * plane + y * out_w;
      for (int64_t x = 0; x < out_w; ++x) d[x] = acc[x * 3 + c] * sc[c] + sh[c];
    }
  }
  return out;
}

Tensor transform_jpeg(const std::vector<uint8_t>& bytes, const std::string& name,
                      const ImageTransformOptions& opt, const Generator& gen) {
  const JpegInfo info = read_jpeg_info(bytes, name);
  if (info.width <= 0 || info.height <= 0)
    ADA_THROW(IoError) << "JPEG file '" << name << "': empty image (" << info.width << "x"
                       << info.height << ")";
  const int64_t W = info.width, H = info.height;
  CropBox box = opt.train ? random_resized_crop_box(H, W, gen, opt) : center_crop_box(H, W, opt);
  const bool flip = opt.train && opt.hflip && uniform(gen, 40) < 0.5;
  // Largest DCT downscale that keeps the crop at least as large as the output.
  int denom = 1;
  if (opt.fast_decode) {
    const double need = static_cast<double>(opt.crop_size);
    for (int d : {8, 4, 2}) {
      bool ok = opt.train ? (box.w / d >= need && box.h / d >= need)
                          : (static_cast<double>(std::min(W, H)) / d >= opt.resize_size);
      if (ok) {
        denom = d;
        break;
      }
    }
  }
  // Scaled-image coordinates: libjpeg's output size is ceil(size / denom).
  const double sw = static_cast<double>((W + denom - 1) / denom) / W;
  const double sh = static_cast<double>((H + denom - 1) / denom) / H;
  CropBox sbox{box.x * sw, box.y * sh, box.w * sw, box.h * sh};
  // Train: crop first, so no pixel outside the crop is read; eval: resize first, the whole image.
  CropBox bounds = opt.train ? sbox : CropBox{0, 0, std::ceil(W * sw), std::ceil(H * sh)};
  Image img;
  if (opt.fast_decode) {
    // Decode only what the filter taps can reach: the box grown by the filter radius, inside
    // the bounds (for train the bounds are the box itself).
    const double margin =
        std::ceil(std::max({sbox.w / opt.crop_size, sbox.h / opt.crop_size, 1.0})) + 1.0;
    auto x0 = static_cast<int64_t>(std::floor(std::max(bounds.x, sbox.x - margin)));
    auto y0 = static_cast<int64_t>(std::floor(std::max(bounds.y, sbox.y - margin)));
    auto x1 =
        static_cast<int64_t>(std::ceil(std::min(bounds.x + bounds.w, sbox.x + sbox.w + margin)));
    auto y1 =
        static_cast<int64_t>(std::ceil(std::min(bounds.y + bounds.h, sbox.y + sbox.h + margin)));
    img = decode_jpeg(bytes, name, denom, x0, y0, x1 - x0, y1 - y0);
  } else {
    img = decode_jpeg(bytes, name, 1);
  }
  return resample_to_tensor(img, sbox, bounds, opt.crop_size, opt.crop_size, flip, opt.mean,
                            opt.std);
}

}  // namespace ada::data
