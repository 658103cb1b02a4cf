// JPEG decode (generated images), the train/eval transforms (shapes, determinism, flip,
// normalisation), ImageFolderDataset, and the bad inputs: corrupt or truncated JPEG, empty class
// folder, missing root.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "data/data_loader.h"
#include "data/image_folder_dataset.h"
#include "data/image_transforms.h"
#include "data/jpeg.h"
#include "data_test_util.h"

namespace ada::data {
namespace {

using testing::expect_error;
using testing::pattern_image;
using testing::TempDir;

double mean_abs_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += std::abs(int(a[i]) - int(b[i]));
  return s / static_cast<double>(a.size());
}

void spit(const std::string& p, const std::vector<uint8_t>& b) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

TEST(Jpeg, DecodeGeneratedImage) {
  Image src = pattern_image(48, 64);
  auto bytes = encode_jpeg(src, 95);
  JpegInfo info = read_jpeg_info(bytes, "mem.jpg");
  EXPECT_EQ(info.width, 64);
  EXPECT_EQ(info.height, 48);
  EXPECT_EQ(info.channels, 3);
  Image out = decode_jpeg(bytes, "mem.jpg");
  EXPECT_EQ(out.width, 64);
  EXPECT_EQ(out.height, 48);
  EXPECT_EQ(out.channels, 3);
  EXPECT_LT(mean_abs_diff(out.pixels, src.pixels), 3.0);
  // DCT scaling: ceil(size / 2).
  Image half = decode_jpeg(bytes, "mem.jpg", 2);
  EXPECT_EQ(half.width, 32);
  EXPECT_EQ(half.height, 24);
  Image eighth = decode_jpeg(encode_jpeg(pattern_image(50, 70)), "mem.jpg", 8);
  EXPECT_EQ(eighth.width, 9);
  EXPECT_EQ(eighth.height, 7);
}

TEST(Jpeg, GreyIsExpandedToRgb) {
  Image g;
  g.height = 16;
  g.width = 24;
  g.channels = 1;
  for (int i = 0; i < 16 * 24; ++i) g.pixels.push_back(static_cast<uint8_t>(i % 200));
  Image out = decode_jpeg(encode_jpeg(g, 100), "grey.jpg");
  ASSERT_EQ(out.channels, 3);
  for (size_t i = 0; i < out.pixels.size(); i += 3) {
    EXPECT_EQ(out.pixels[i], out.pixels[i + 1]);
    EXPECT_EQ(out.pixels[i], out.pixels[i + 2]);
  }
}

TEST(Jpeg, RegionDecodeMatchesFullDecode) {
  auto bytes = encode_jpeg(pattern_image(120, 160), 90);
  Image full = decode_jpeg(bytes, "r.jpg");
  Image reg = decode_jpeg(bytes, "r.jpg", 1, 37, 21, 50, 40);
  EXPECT_LE(reg.x0, 37);
  EXPECT_GE(reg.x0 + reg.width, 87);
  EXPECT_EQ(reg.y0, 21);
  EXPECT_EQ(reg.height, 40);
  double diff = 0;
  for (int64_t y = 0; y < reg.height; ++y)
    for (int64_t x = 0; x < reg.width; ++x)
      for (int c = 0; c < 3; ++c)
        diff += std::abs(int(reg.pixels[(y * reg.width + x) * 3 + c]) -
                         int(full.pixels[((y + reg.y0) * full.width + x + reg.x0) * 3 + c]));
  EXPECT_LT(diff / (reg.height * reg.width * 3), 0.5);
}

TEST(Jpeg, CorruptAndTruncatedFilesAreErrorsNamingTheFile) {
  auto bytes = encode_jpeg(pattern_image(64, 64), 90);
  std::vector<uint8_t> garbage(500, 0x42);
  expect_error<IoError>([&] { decode_jpeg(garbage, "photos/cat/garbage.jpg"); },
                        {"photos/cat/garbage.jpg", "Not a JPEG file"});
  expect_error<IoError>([&] { decode_jpeg({}, "empty.jpg"); }, {"empty.jpg"});
  std::vector<uint8_t> truncated(bytes.begin(),
                                 bytes.begin() + static_cast<long>(bytes.size() / 2));
  expect_error<IoError>([&] { decode_jpeg(truncated, "half.jpg"); },
                        {"half.jpg", "Premature end of JPEG file"});
  // Even when only a region at the top is wanted, the truncated tail is detected.
  expect_error<IoError>([&] { decode_jpeg(truncated, "half.jpg", 1, 0, 0, 8, 8); }, {"half.jpg"});
  std::vector<uint8_t> header_only(bytes.begin(), bytes.begin() + 20);
  expect_error<IoError>([&] { read_jpeg_info(header_only, "h.jpg"); }, {"h.jpg"});
}

// A file cut short with its end marker written after (the data audit of stop 83): libjpeg warns
// and fills the rest grey; a header declaring a size no decode should take.
TEST(Jpeg, ImageDataEndingAtAMarkerAndHugeHeadersAreErrors) {
  const auto bytes = encode_jpeg(pattern_image(256, 256), 90);
  std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<long>(bytes.size() * 3 / 10));
  cut.push_back(0xFF);
  cut.push_back(0xD9);
  expect_error<IoError>([&] { decode_jpeg(cut, "cut.jpg"); },
                        {"cut.jpg", "premature end of data segment", "remove, replace"});
  // The frame header (SOF0: FF C0, length, precision, height, width) declares 65000 x 65000.
  std::vector<uint8_t> huge = bytes;
  size_t sof = 2;
  while (sof + 9 < huge.size() && !(huge[sof] == 0xFF && huge[sof + 1] == 0xC0)) ++sof;
  ASSERT_LT(sof + 9, huge.size());
  for (size_t at : {sof + 5, sof + 7}) {
    huge[at] = 65000 >> 8;
    huge[at + 1] = 65000 & 0xFF;
  }
  for (bool header_only : {true, false})
    expect_error<IoError>(
        [&] {
          if (header_only)
            read_jpeg_info(huge, "huge.jpg");
          else
            decode_jpeg(huge, "huge.jpg");
        },
        {"huge.jpg", "declares 65000 x 65000 pixels", "too large"});
}

TEST(Transforms, RandomResizedCropBoxFollowsTorchvisionRules) {
  ImageTransformOptions opt;
  int fallback = 0;
  for (int64_t i = 0; i < 500; ++i) {
    Generator g = example_generator(1, 0, i);
    CropBox b = random_resized_crop_box(375, 500, g, opt);
    CropBox again = random_resized_crop_box(375, 500, g, opt);
    EXPECT_EQ(b.x, again.x);
    EXPECT_EQ(b.w, again.w);
    ASSERT_GE(b.x, 0);
    ASSERT_GE(b.y, 0);
    ASSERT_LE(b.x + b.w, 500);
    ASSERT_LE(b.y + b.h, 375);
    EXPECT_EQ(b.w, std::floor(b.w));  // integer boxes, as torchvision
    const double area = b.w * b.h / (375.0 * 500.0), ratio = b.w / b.h;
    if (area > 1.0 - 1e-9) fallback++;
    EXPECT_GE(area, 0.08 * 0.97);  // rounding of w, h
    EXPECT_GE(ratio, 0.75 * 0.95);
    EXPECT_LE(ratio, 4.0 / 3.0 * 1.05);
  }
  EXPECT_LT(fallback, 50);
  // A very wide image: the fallback centre crop clamps the ratio to 4/3.
  ImageTransformOptions narrow = opt;
  narrow.scale_min = narrow.scale_max = 1.0;
  CropBox b = random_resized_crop_box(100, 1000, example_generator(0, 0, 0), narrow);
  EXPECT_EQ(b.h, 100);
  EXPECT_EQ(b.w, 133);
  EXPECT_EQ(b.x, (1000 - 133) / 2);
}

TEST(Transforms, CenterCropBoxIsResizeThenCrop) {
  ImageTransformOptions opt;  // 256 / 224
  // 500x375: resized to 341x256, crop at left round(58.5) = 58 (half to even), top 16.
  CropBox b = center_crop_box(375, 500, opt);
  const double s = 500.0 / 341.0;
  EXPECT_NEAR(b.x, 58 * s, 1e-9);
  EXPECT_NEAR(b.w, 224 * s, 1e-9);
  EXPECT_NEAR(b.y, 16 * 375.0 / 256.0, 1e-9);
}

TEST(Transforms, ResampleFlipAndNormalise) {
  Image im = pattern_image(40, 60);
  std::array<float, 3> mean = {0.5f, 0.5f, 0.5f}, sd = {0.5f, 0.25f, 1.f};
  CropBox all{0, 0, 60, 40};
  Tensor a = resample_to_tensor(im, all, all, 20, 30, false, mean, sd);
  Tensor f = resample_to_tensor(im, all, all, 20, 30, true, mean, sd);
  ASSERT_EQ(a.shape(), (Shape{3, 20, 30}));
  auto av = a.to_vector<float>(), fv = f.to_vector<float>();
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 20; ++y)
      for (int x = 0; x < 30; ++x)
        ASSERT_EQ(av[(c * 20 + y) * 30 + x], fv[(c * 20 + y) * 30 + (29 - x)]);
  // Identity resample (same size) reproduces pixels exactly, normalised.
  Tensor id = resample_to_tensor(im, all, all, 40, 60, false, mean, sd);
  auto iv = id.to_vector<float>();
  for (int y : {0, 17, 39})
    for (int x : {0, 31, 59})
      for (int c = 0; c < 3; ++c)
        EXPECT_NEAR(iv[(c * 40 + y) * 60 + x],
                    (im.pixels[(y * 60 + x) * 3 + c] / 255.f - mean[c]) / sd[c], 1e-4);
  // A constant image stays constant whatever the scale (weights sum to one).
  Image flat = pattern_image(50, 50);
  for (size_t i = 0; i < flat.pixels.size(); ++i) flat.pixels[i] = 100;
  CropBox fb{0, 0, 50, 50};
  for (float v :
       resample_to_tensor(flat, {3.5, 2.25, 40, 33}, fb, 7, 9, false, mean, sd).to_vector<float>())
    EXPECT_NEAR(std::abs(v), std::abs((100.f / 255.f - 0.5f) / 0.5f) + 0.f, 2.0f);
}

TEST(Transforms, TrainAndEvalShapesAndDeterminism) {
  auto bytes = encode_jpeg(pattern_image(300, 400), 90);
  ImageTransformOptions train;
  Tensor a = transform_jpeg(bytes, "a.jpg", train, example_generator(5, 0, 3));
  Tensor b = transform_jpeg(bytes, "a.jpg", train, example_generator(5, 0, 3));
  Tensor c = transform_jpeg(bytes, "a.jpg", train, example_generator(5, 1, 3));
  EXPECT_EQ(a.shape(), (Shape{3, 224, 224}));
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_NE(a.to_vector<float>(), c.to_vector<float>());
  ImageTransformOptions eval;
  eval.train = false;
  Tensor e1 = transform_jpeg(bytes, "a.jpg", eval, example_generator(5, 0, 3));
  Tensor e2 = transform_jpeg(bytes, "a.jpg", eval, example_generator(9, 7, 1));
  EXPECT_EQ(e1.shape(), (Shape{3, 224, 224}));
  EXPECT_EQ(e1.to_vector<float>(), e2.to_vector<float>());  // eval has no randomness
  // Configurable sizes.
  ImageTransformOptions small = eval;
  small.crop_size = 32;
  small.resize_size = 36;
  EXPECT_EQ(transform_jpeg(bytes, "a.jpg", small, Generator()).shape(), (Shape{3, 32, 32}));
  // fast decode (DCT downscale, region) stays close to a full decode.
  auto big = encode_jpeg(pattern_image(900, 1200), 92);
  ImageTransformOptions slow = eval;
  slow.fast_decode = false;
  auto fv = transform_jpeg(big, "big.jpg", eval, Generator()).to_vector<float>();
  auto sv = transform_jpeg(big, "big.jpg", slow, Generator()).to_vector<float>();
  double d = 0;
  for (size_t i = 0; i < fv.size(); ++i) d += std::abs(fv[i] - sv[i]);
  EXPECT_LT(d / fv.size(), 0.05);  // in normalised units (1/255 / 0.225 = 0.017 per grey level)
  // The eval crop of a horizontal ramp: red rises left to right around the centre.
  auto red = [&](int x) { return fv[112 * 224 + x]; };
  EXPECT_LT(red(10), red(112));
  EXPECT_LT(red(112), red(210));
}

void make_folder(const std::string& root) {
  namespace fs = std::filesystem;
  for (std::string cls : {"dog", "cat", "emu"}) {
    fs::create_directories(root + "/" + cls);
    for (int i = 0; i < 3; ++i)
      write_jpeg(root + "/" + cls + "/img" + std::to_string(i) + (i == 2 ? ".JPEG" : ".jpg"),
                 pattern_image(60 + 10 * i, 80, i));
  }
  std::ofstream(root + "/cat/notes.txt") << "not an image";
}

TEST(ImageFolder, ScansClassesSortedAndLoads) {
  TempDir dir;
  make_folder(dir.str());
  ImageTransformOptions opt;
  opt.crop_size = 48;
  opt.resize_size = 56;
  ImageFolderDataset ds(dir.str(), opt, 3);
  EXPECT_EQ(ds.classes(), (std::vector<std::string>{"cat", "dog", "emu"}));
  EXPECT_EQ(ds.size(), 9);
  EXPECT_EQ(ds.label(0), 0);
  EXPECT_EQ(ds.label(4), 1);
  EXPECT_EQ(ds.label(8), 2);
  EXPECT_NE(ds.path(0).find("cat/img0.jpg"), std::string::npos);
  Example ex = ds.get(5, 0);
  EXPECT_EQ(ex.at("image").shape(), (Shape{3, 48, 48}));
  EXPECT_EQ(ex.at("label").to_vector<int64_t>()[0], 1);
  // Through the loader: same batches with 0 and 2 workers.
  std::vector<std::vector<float>> runs;
  for (int w : {0, 2}) {
    auto shared = std::make_shared<ImageFolderDataset>(dir.str(), opt, 3);
    DataLoader loader(shared, DistributedSampler(9, {0, 1, 1, true, false}), {4, w, 0, false});
    loader.start_epoch(2);
    std::vector<float> all;
    while (auto b = loader.next()) {
      EXPECT_EQ(b->at("image").dim(), 4);
      auto v = b->at("image").to_vector<float>();
      all.insert(all.end(), v.begin(), v.end());
    }
    runs.push_back(all);
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST(ImageFolder, BadInputs) {
  TempDir dir;
  ImageTransformOptions opt;
  opt.crop_size = 32;
  opt.resize_size = 32;
  expect_error<IoError>([&] { ImageFolderDataset(dir / "nope", opt); },
                        {dir / "nope", "does not exist"});
  expect_error<IoError>([&] { ImageFolderDataset(dir.str(), opt); },
                        {dir.str(), "no class sub-folders"});
  make_folder(dir.str());
  std::filesystem::create_directories(dir / "zebra");
  std::ofstream(dir / "zebra/readme.txt") << "x";
  expect_error<IoError>([&] { ImageFolderDataset(dir.str(), opt); },
                        {dir / "zebra", "holds no .jpg/.jpeg file"});
  std::filesystem::remove_all(dir / "zebra");
  // A corrupt file inside the folder: get() and the loader name it.
  auto good = encode_jpeg(pattern_image(64, 64));
  spit(dir / "dog/img1.jpg", std::vector<uint8_t>(good.begin(), good.begin() + 200));
  auto ds = std::make_shared<ImageFolderDataset>(dir.str(), opt);
  const std::string bad = dir / "dog/img1.jpg";
  expect_error<IoError>([&] { ds->get(4, 0); }, {bad, "Premature end"});
  DataLoader loader(ds, DistributedSampler(9, {0, 1, 0, false}), {2, 2, 0, false});
  expect_error<IoError>(
      [&] {
        while (loader.next()) {
        }
      },
      {bad, "example index 4", "worker thread"});
  spit(dir / "dog/img1.jpg", {'G', 'I', 'F', '8', '9', 'a'});
  expect_error<IoError>([&] { ds->get(4, 0); }, {bad, "Not a JPEG file"});
}

// What the folder holds that is not read (torchvision's ImageFolder would read it) is said once.
TEST(ImageFolder, WhatIsNotReadIsSaidOnce) {
  TempDir dir;
  make_folder(dir.str());
  const auto jpeg = encode_jpeg(pattern_image(40, 40));
  spit(dir / "loose.jpg", jpeg);
  std::filesystem::create_directories(dir / "cat/sub");
  spit(dir / "cat/sub/deep.jpg", jpeg);
  std::ofstream(dir / "dog/photo.png") << "png";
  std::ofstream(dir / "dog/notes.txt") << "not an image";
  ImageTransformOptions opt;
  opt.crop_size = 32;
  ::testing::internal::CaptureStderr();
  ImageFolderDataset ds(dir.str(), opt);
  ImageFolderDataset again(dir.str(), opt);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(ds.size(), 9);
  for (const std::string& said :
       {"1 .jpg/.jpeg file(s) outside the class folders (e.g. '" + (dir / "loose.jpg") + "')",
        "1 folder(s) inside class folders (e.g. '" + (dir / "cat/sub") + "')",
        "1 image(s) in another format than JPEG (e.g. '" + (dir / "dog/photo.png") + "')"}) {
    const size_t at = log.find(said);
    EXPECT_NE(at, std::string::npos) << said << " in:\n" << log;
    EXPECT_EQ(log.find(said, at + 1), std::string::npos) << "said twice:\n" << log;
  }
  EXPECT_EQ(log.find("notes.txt"), std::string::npos) << log;
}

// The training transform crops, then resizes: its crop may exceed resize_size, which only the
// evaluation transform uses (crop_size 300 was refused against a resize_size no one had set).
TEST(ImageFolder, ATrainingCropLargerThanTheEvaluationResizeIsTheConfigsToRefuse) {
  TempDir dir;
  make_folder(dir.str());
  ImageTransformOptions opt;
  opt.crop_size = 300;
  opt.resize_size = 256;
  EXPECT_NO_THROW(ImageFolderDataset(dir.str(), opt));
  opt.train = false;
  expect_error<ConfigError>([&] { ImageFolderDataset(dir.str(), opt); },
                            {"crop_size 300 and resize_size 256"});
}

// Eval classes are listed independently of the training ones: a class folder missing from either
// would shift every later label, silently. Both lists must be equal, and equal num_classes.
TEST(ImageFolder, TrainAndEvalClassesMustAgreeWithEachOtherAndTheModel) {
  TempDir dir;
  const std::string train_root = dir / "train", eval_root = dir / "val";
  make_folder(train_root);  // cat, dog, emu
  make_folder(eval_root);
  ImageTransformOptions opt;
  opt.crop_size = 32;
  opt.resize_size = 32;
  auto open = [&](const std::string& root) { return ImageFolderDataset(root, opt); };
  EXPECT_NO_THROW(check_image_folder_classes(open(train_root), nullptr, 3));
  {
    const auto train = open(train_root), eval = open(eval_root);
    EXPECT_NO_THROW(check_image_folder_classes(train, &eval, 3));
    EXPECT_NO_THROW(check_image_folder_classes(train, &eval, 0));  // 0: the model has no classes
    expect_error<IoError>(
        [&] { check_image_folder_classes(train, &eval, 10); },
        {train_root, "3 class folders", "the model has 10 classes", "set model.num_classes to 3"});
  }
  // 'dog' missing from the eval folder: eval's 'emu' (index 1) would be read as dog.
  std::filesystem::remove_all(eval_root + "/dog");
  {
    const auto train = open(train_root), eval = open(eval_root);
    expect_error<IoError>(
        [&] { check_image_folder_classes(train, &eval, 3); },
        {"class 1 is 'dog' in '" + train_root + "'", "'" + eval_root + "' has no folder 'dog'",
         "3 training classes", "2 evaluation classes", "same class sub-folders"});
  }
  // An extra class in the eval folder is named the same way, from the other side.
  make_folder(eval_root);
  std::filesystem::create_directories(eval_root + "/bee");
  write_jpeg(eval_root + "/bee/x.jpg", pattern_image(40, 40));
  {
    const auto train = open(train_root), eval = open(eval_root);
    expect_error<IoError>(
        [&] { check_image_folder_classes(train, &eval, 3); },
        {"class 0 is 'bee' in '" + eval_root + "'", "'" + train_root + "' has no folder 'bee'"});
  }
}

}  // namespace
}  // namespace ada::data
