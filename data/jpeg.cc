#include "data/jpeg.h"

// clang-format off
#include <cstdio>
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <fstream>

#include "base/error.h"

namespace ada::data {

namespace {

// libjpeg error manager that long-jumps back to the decode function instead of exit().
// Only C objects live in the frames between setjmp and longjmp (libjpeg's own and run_decode's
// locals, none with a destructor); results travel through a struct owned by the caller's frame.
struct ErrorMgr {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void on_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorMgr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

// Warnings are ignored (many real JPEGs carry harmless ones such as extraneous bytes before a
// marker), except an end of the image data before the image's end: at the end of the file, or at
// a marker (a file cut short and its end marker written after): libjpeg would fill the rest grey.
void on_emit_message(j_common_ptr cinfo, int level) {
  if (level == -1 &&
      (cinfo->err->msg_code == JWRN_JPEG_EOF || cinfo->err->msg_code == JWRN_HIT_MARKER))
    on_error_exit(cinfo);
}

// The most pixels a decode takes (16,384 x 16,384): a header declaring more is damaged, or an
// image to downscale first (libjpeg would ask for gigabytes for it before reading any data).
constexpr uint64_t kMaxPixels = uint64_t{1} << 28;

void on_output_message(j_common_ptr) {}

void install(ErrorMgr& err) {
  jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error_exit;
  err.pub.emit_message = on_emit_message;
  err.pub.output_message = on_output_message;
  err.message[0] = 0;
}

struct DecodeJob {
  const uint8_t* data = nullptr;
  size_t size = 0;
  int denom = 1;
  bool header_only = false;
  int64_t rx = 0, ry = 0, rw = 0, rh = 0;  // region in scaled coordinates (rw == 0: all)
  // outputs
  JpegInfo info;
  Image* image = nullptr;
  bool unsupported_colour = false;
  std::vector<uint8_t> cmyk_row;  // scratch, owned here so that no longjmp skips a destructor
  char message[JMSG_LENGTH_MAX] = {0};
};

void cmyk_to_rgb(const uint8_t* in, uint8_t* out, size_t n, bool inverted) {
  // Adobe writes CMYK JPEGs inverted (0 = full ink); nearly every CMYK JPEG in the wild is such.
  for (size_t i = 0; i < n; ++i) {
    int c = in[4 * i], m = in[4 * i + 1], y = in[4 * i + 2], k = in[4 * i + 3];
    if (!inverted) {
      c = 255 - c;
      m = 255 - m;
      y = 255 - y;
      k = 255 - k;
    }
    out[3 * i] = static_cast<uint8_t>(c * k / 255);
    out[3 * i + 1] = static_cast<uint8_t>(m * k / 255);
    out[3 * i + 2] = static_cast<uint8_t>(y * k / 255);
  }
}

// Returns false with job->message set on any libjpeg error.
bool run_decode(DecodeJob* job) {
  jpeg_decompress_struct cinfo;
  ErrorMgr err;
  install(err);
  cinfo.err = &err.pub;
  if (setjmp(err.jump)) {
    std::memcpy(job->message, err.message, sizeof job->message);
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, job->data, static_cast<unsigned long>(job->size));
  jpeg_read_header(&cinfo, TRUE);
  job->info.width = cinfo.image_width;
  job->info.height = cinfo.image_height;
  job->info.channels = cinfo.num_components;
  if (uint64_t{cinfo.image_width} * cinfo.image_height > kMaxPixels) {
    std::snprintf(job->message, sizeof job->message,
                  "its header declares %u x %u pixels, more than the %llu a decode takes",
                  cinfo.image_width, cinfo.image_height,
                  static_cast<unsigned long long>(kMaxPixels));
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  if (job->header_only) {
    jpeg_destroy_decompress(&cinfo);
    return true;
  }
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  if (cmyk) {
    cinfo.out_color_space = JCS_CMYK;
  } else if (cinfo.jpeg_color_space == JCS_GRAYSCALE || cinfo.jpeg_color_space == JCS_YCbCr ||
             cinfo.jpeg_color_space == JCS_RGB) {
    cinfo.out_color_space = JCS_RGB;
  } else {
    job->unsupported_colour = true;
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  cinfo.scale_num = 1;
  cinfo.scale_denom = static_cast<unsigned>(job->denom);
  cinfo.dct_method = JDCT_ISLOW;
  jpeg_start_decompress(&cinfo);
  const int64_t full_w = cinfo.output_width, full_h = cinfo.output_height;
  JDIMENSION xoff = 0, width = cinfo.output_width;
  int64_t y_begin = 0, y_end = full_h;
  if (job->rw > 0 && job->rh > 0) {
    int64_t rx = std::clamp<int64_t>(job->rx, 0, full_w - 1);
    int64_t ry = std::clamp<int64_t>(job->ry, 0, full_h - 1);
    int64_t rw = std::min(job->rw, full_w - rx), rh = std::min(job->rh, full_h - ry);
    xoff = static_cast<JDIMENSION>(rx);
    width = static_cast<JDIMENSION>(rw);
    if (width < cinfo.output_width)
      jpeg_crop_scanline(&cinfo, &xoff, &width);
    else
      xoff = 0, width = cinfo.output_width;
    y_begin = ry;
    y_end = ry + rh;
  }
  Image* img = job->image;
  img->width = width;
  img->height = y_end - y_begin;
  img->channels = 3;
  img->x0 = xoff;
  img->y0 = y_begin;
  img->pixels.resize(static_cast<size_t>(img->width * img->height * 3));
  if (cmyk) job->cmyk_row.resize(static_cast<size_t>(width) * 4);
  bool inverted = cmyk && cinfo.saw_Adobe_marker;
  if (y_begin > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(y_begin));
  while (static_cast<int64_t>(cinfo.output_scanline) < y_end) {
    uint8_t* dst =
        img->pixels.data() + static_cast<size_t>(cinfo.output_scanline - y_begin) * width * 3;
    JSAMPROW row = cmyk ? job->cmyk_row.data() : dst;
    jpeg_read_scanlines(&cinfo, &row, 1);
    if (cmyk) cmyk_to_rgb(job->cmyk_row.data(), dst, width, inverted);
  }
  // Read (skip) the rest so that a truncated or corrupt tail is detected however small the region.
  if (cinfo.output_scanline < cinfo.output_height)
    jpeg_skip_scanlines(&cinfo, cinfo.output_height - cinfo.output_scanline);
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

}  // namespace

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) ADA_THROW(IoError) << "cannot open '" << path << "' (" << std::strerror(errno) << ")";
  std::streamsize n = in.tellg();
  in.seekg(0);
  std::vector<uint8_t> bytes(static_cast<size_t>(std::max<std::streamsize>(n, 0)));
  if (n > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), n))
    ADA_THROW(IoError) << "cannot read '" << path << "' (" << std::strerror(errno) << ")";
  return bytes;
}

JpegInfo read_jpeg_info(const std::vector<uint8_t>& bytes, const std::string& name) {
  DecodeJob job;
  job.data = bytes.data();
  job.size = bytes.size();
  job.header_only = true;
  if (!run_decode(&job))
    ADA_THROW(IoError) << "JPEG file '" << name << "': " << job.message
                       << "; the file is corrupt, not a JPEG or too large (remove, replace or "
                          "downscale it)";
  return job.info;
}

Image decode_jpeg(const std::vector<uint8_t>& bytes, const std::string& name, int scale_denom,
                  int64_t region_x, int64_t region_y, int64_t region_w, int64_t region_h) {
  ADA_CHECK_ARG(scale_denom == 1 || scale_denom == 2 || scale_denom == 4 || scale_denom == 8,
                ConfigError)
      << "decode_jpeg '" << name << "': scale_denom " << scale_denom << " not in {1, 2, 4, 8}";
  Image image;
  DecodeJob job;
  job.data = bytes.data();
  job.size = bytes.size();
  job.denom = scale_denom;
  job.rx = region_x;
  job.ry = region_y;
  job.rw = region_w;
  job.rh = region_h;
  job.image = &image;
  if (!run_decode(&job)) {
    if (job.unsupported_colour)
      ADA_THROW(IoError) << "JPEG file '" << name
                         << "': unsupported colour space; convert it to RGB or greyscale";
    ADA_THROW(IoError) << "JPEG file '" << name << "': " << job.message
                       << "; the file is corrupt, truncated or too large (remove, replace or "
                          "downscale it)";
  }
  return image;
}

namespace {
struct EncodeJob {
  const Image* image = nullptr;
  int quality = 90;
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
  char message[JMSG_LENGTH_MAX] = {0};
};

bool run_encode(EncodeJob* job) {
  jpeg_compress_struct cinfo;
  ErrorMgr err;
  install(err);
  cinfo.err = &err.pub;
  if (setjmp(err.jump)) {
    std::memcpy(job->message, err.message, sizeof job->message);
    jpeg_destroy_compress(&cinfo);
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, &job->out, &job->out_size);
  const Image& im = *job->image;
  cinfo.image_width = static_cast<JDIMENSION>(im.width);
  cinfo.image_height = static_cast<JDIMENSION>(im.height);
  cinfo.input_components = static_cast<int>(im.channels);
  cinfo.in_color_space = im.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, job->quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(im.pixels.data()) +
                   static_cast<size_t>(cinfo.next_scanline) * im.width * im.channels;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return true;
}
}  // namespace

std::vector<uint8_t> encode_jpeg(const Image& image, int quality) {
  ADA_CHECK_ARG(image.channels == 1 || image.channels == 3, ConfigError)
      << "encode_jpeg: " << image.channels << " channels; only 1 (grey) or 3 (RGB)";
  ADA_CHECK_ARG(
      image.width > 0 && image.height > 0 &&
          image.pixels.size() == static_cast<size_t>(image.width * image.height * image.channels),
      ShapeError)
      << "encode_jpeg: " << image.pixels.size() << " bytes for a " << image.height << "x"
      << image.width << "x" << image.channels << " image";
  EncodeJob job;
  job.image = &image;
  job.quality = std::clamp(quality, 1, 100);
  bool ok = run_encode(&job);
  std::vector<uint8_t> out;
  if (ok) out.assign(job.out, job.out + job.out_size);
  std::free(job.out);
  if (!ok) ADA_THROW(IoError) << "encode_jpeg: " << job.message;
  return out;
}

void write_jpeg(const std::string& path, const Image& image, int quality) {
  std::vector<uint8_t> bytes = encode_jpeg(image, quality);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) ADA_THROW(IoError) << "cannot write '" << path << "' (" << std::strerror(errno) << ")";
}

}  // namespace ada::data
