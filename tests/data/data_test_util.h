// Helpers for the data tests (sampler, loader, IDX, JPEG): a self-deleting temporary folder and
// small generated JPEG images.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "base/error.h"
#include "data/jpeg.h"
#include "util/temp_dir.h"

namespace ada::data::testing {

using ada::testing::TempDir;  // tests/util/temp_dir.h

// A smooth RGB test pattern (gradients differ per channel, so crops and flips are visible).
inline Image pattern_image(int64_t height, int64_t width, int variant = 0) {
  Image im;
  im.height = height;
  im.width = width;
  im.channels = 3;
  im.pixels.resize(static_cast<size_t>(height * width * 3));
  for (int64_t y = 0; y < height; ++y)
    for (int64_t x = 0; x < width; ++x) {
      uint8_t* p = &im.pixels[static_cast<size_t>((y * width + x) * 3)];
      p[0] = static_cast<uint8_t>(255 * x / std::max<int64_t>(width - 1, 1));
      p[1] = static_cast<uint8_t>(255 * y / std::max<int64_t>(height - 1, 1));
      p[2] = static_cast<uint8_t>((variant * 40 + (x + y) / 4) % 256);
    }
  return im;
}

// Expects `fn` to throw E whose message contains every one of `parts`.
template <class E, class Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    std::string msg = e.what();
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

}  // namespace ada::data::testing
