// JPEG decoding and encoding over libjpeg-turbo, with errors as IoError naming the file (our own
// error manager: libjpeg's default one would call exit()). Decoding yields 8-bit RGB in HWC order
// (greyscale is expanded, Adobe CMYK/YCCK converted); it can scale by 1/2, 1/4, 1/8 in the DCT
// and decode only a region, which is how the image transforms avoid decoding pixels they drop.
// A truncated file ("premature end of JPEG file") is an error, not a grey-filled image.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ada::data {

// 8-bit image in HWC order. `x0`, `y0`: where pixel (0, 0) sits in the (scaled) full image when
// this is a decoded region; 0 otherwise.
struct Image {
  int64_t height = 0, width = 0, channels = 0;
  int64_t x0 = 0, y0 = 0;
  std::vector<uint8_t> pixels;
};

struct JpegInfo {
  int64_t width = 0, height = 0, channels = 0;  // as stored (channels: 1 grey, 3 colour, 4 CMYK)
};

// Whole file into memory; IoError naming the file if it cannot be read.
std::vector<uint8_t> read_file_bytes(const std::string& path);

// Header only. `name` is the file name used in error messages.
JpegInfo read_jpeg_info(const std::vector<uint8_t>& bytes, const std::string& name);

// Decodes to RGB. scale_denom in {1, 2, 4, 8}: the image is scaled by 1/scale_denom in the DCT
// (output size ceil(size / denom)). If region_w > 0 and region_h > 0 only the region
// [region_x, region_x + region_w) x [region_y, region_y + region_h) of the scaled image is kept;
// the result may start left of region_x and be wider (libjpeg crops at iMCU columns): its x0/y0
// say where it lies. The whole stream is still read, so corruption anywhere is detected.
Image decode_jpeg(const std::vector<uint8_t>& bytes, const std::string& name, int scale_denom = 1,
                  int64_t region_x = 0, int64_t region_y = 0, int64_t region_w = 0,
                  int64_t region_h = 0);

// Encodes an RGB (3 channels) or grey (1 channel) image at the given quality (1..100).
std::vector<uint8_t> encode_jpeg(const Image& image, int quality = 90);
void write_jpeg(const std::string& path, const Image& image, int quality = 90);

}  // namespace ada::data
