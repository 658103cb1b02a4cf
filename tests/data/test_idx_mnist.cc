// IDX reading (raw and gzip) and every malformed-input case; MnistDataset on generated files;
// the real MNIST / Fashion-MNIST files when tools/fetch_data.sh has fetched them.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "data/idx.h"
#include "data/mnist_dataset.h"
#include "data_test_util.h"

namespace ada::data {
namespace {

using testing::expect_error;
using testing::TempDir;

std::vector<uint8_t> slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void spit(const std::string& p, const std::vector<uint8_t>& b) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::vector<uint8_t> ramp(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + 3);
  return v;
}

TEST(Idx, RoundTripRawAndGzip) {
  TempDir dir;
  for (bool gz : {false, true}) {
    auto data = ramp(5 * 4 * 3);
    std::string p = dir / (gz ? "a.idx.gz" : "a.idx");
    write_idx(p, {5, 4, 3}, data, gz);
    IdxArray a = read_idx(p);
    EXPECT_EQ(a.dims, (std::vector<int64_t>{5, 4, 3}));
    EXPECT_EQ(a.data, data);
    auto bytes = slurp(p);
    if (gz) {
      EXPECT_EQ(bytes[0], 0x1f);
    } else {
      EXPECT_EQ(bytes.size(), 4u + 12u + 60u);
      EXPECT_EQ((std::vector<uint8_t>(bytes.begin(), bytes.begin() + 8)),
                (std::vector<uint8_t>{0, 0, 8, 3, 0, 0, 0, 5}));
    }
  }
  // Detection is by content: a gzipped file without ".gz" reads too.
  write_idx(dir / "noext", {3}, {1, 2, 3}, true);
  EXPECT_EQ(read_idx(dir / "noext").data, (std::vector<uint8_t>{1, 2, 3}));
}

TEST(Idx, EveryBadInputNamesTheFile) {
  TempDir dir;
  const std::string p = dir / "bad-images-idx3-ubyte";
  expect_error<IoError>([&] { read_idx(p); }, {p, "cannot open", "fetch_data.sh"});
  spit(p, {});
  expect_error<IoError>([&] { read_idx(p); }, {p, "0 bytes", "truncated"});
  spit(p, {0x12, 0x34, 0x08, 0x03, 0, 0, 0, 1});
  expect_error<IoError>([&] { read_idx(p); }, {p, "wrong magic 0x12340803"});
  spit(p, {0, 0, 0x0D, 0x01, 0, 0, 0, 1, 0, 0, 0, 0});
  expect_error<IoError>([&] { read_idx(p); }, {p, "element type 0xd", "only 0x08"});
  spit(p, {0, 0, 0x08, 0x00});
  expect_error<IoError>([&] { read_idx(p); }, {p, "rank 0"});
  spit(p, {0, 0, 0x08, 0x03, 0, 0, 0, 2, 0, 0});
  expect_error<IoError>([&] { read_idx(p); }, {p, "truncated header", "needs 16"});
  // Payload shorter than the header promises.
  write_idx(p, {10, 28, 28}, ramp(10 * 28 * 28));
  auto bytes = slurp(p);
  spit(p, std::vector<uint8_t>(bytes.begin(), bytes.end() - 100));
  expect_error<IoError>([&] { read_idx(p); }, {p, "truncated", "promises 7840", "has 7740"});
  // Trailing bytes.
  bytes.push_back(9);
  spit(p, bytes);
  expect_error<IoError>([&] { read_idx(p); }, {p, "1 unexpected bytes"});
}

// Found while writing fuzz_idx (tests/fuzz/corpus/idx/crash-dims-overflow): 65536 x 2^24 x 2^24
// elements wrapped to 0 in 64 bits, so a 16-byte file passed as a huge, empty image set.
TEST(Idx, DimensionsWhoseProductOverflowsAreRejected) {
  TempDir dir;
  const std::string p = dir / "huge-idx3-ubyte";
  spit(p, {0, 0, 0x08, 0x03, 0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0});
  expect_error<IoError>([&] { read_idx(p); }, {p, "implausible dimensions"});
}

TEST(Idx, BadGzip) {
  TempDir dir;
  const std::string p = dir / "x.gz";
  write_idx(p, {50, 28, 28}, ramp(50 * 28 * 28), true);
  auto gz = slurp(p);
  // Truncated gzip stream.
  spit(p, std::vector<uint8_t>(gz.begin(), gz.begin() + static_cast<long>(gz.size() / 2)));
  expect_error<IoError>([&] { read_idx(p); }, {p, "gzip"});
  // Corrupted deflate data (CRC or stream error).
  auto bad = gz;
  for (size_t i = 20; i < 60 && i < bad.size(); ++i) bad[i] ^= 0x5A;
  spit(p, bad);
  expect_error<IoError>([&] { read_idx(p); }, {p});
}

TEST(Idx, WrongMagicInsideGzip) {
  TempDir dir;
  // write_idx always writes a valid magic, so make the bad content by hand and gzip it.
  const std::string p = dir / "zip-in-gzip.gz";
  gzFile f = gzopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  const unsigned char content[] = {'P', 'K', 3, 4, 0, 0, 0, 0};
  ASSERT_EQ(gzwrite(f, content, sizeof content), static_cast<int>(sizeof content));
  ASSERT_EQ(gzclose(f), Z_OK);
  expect_error<IoError>([&] { read_idx(p); }, {p, "wrong magic 0x504b0304", "after gunzip"});
}

void write_mnist_like(const std::string& dir, const std::string& prefix, int64_t n, bool gz) {
  std::vector<uint8_t> images(static_cast<size_t>(n * 28 * 28));
  std::vector<uint8_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    labels[i] = static_cast<uint8_t>(i % 10);
    for (int64_t p = 0; p < 28 * 28; ++p) images[i * 784 + p] = static_cast<uint8_t>((i + p) % 256);
  }
  const std::string ext = gz ? ".gz" : "";
  write_idx(dir + "/" + prefix + "-images-idx3-ubyte" + ext, {n, 28, 28}, images, gz);
  write_idx(dir + "/" + prefix + "-labels-idx1-ubyte" + ext, {n}, labels, gz);
}

TEST(Mnist, ReadsAndNormalises) {
  TempDir dir;
  write_mnist_like(dir.str(), "train", 30, false);
  write_mnist_like(dir.str(), "t10k", 12, true);
  auto train = MnistDataset::open(dir.str(), "train");
  auto test = MnistDataset::open(dir.str(), "test", MnistOptions{0.5f, 0.25f});
  EXPECT_EQ(train->size(), 30);
  EXPECT_EQ(test->size(), 12);
  Example ex = train->get(13, 0);
  EXPECT_EQ(ex.at("image").shape(), (Shape{1, 28, 28}));
  EXPECT_EQ(ex.at("label").shape(), Shape{});
  EXPECT_EQ(ex.at("label").to_vector<int64_t>()[0], 3);
  auto px = ex.at("image").to_vector<float>();
  for (int p : {0, 100, 783}) {
    float raw = static_cast<float>((13 + p) % 256) / 255.f;
    EXPECT_NEAR(px[p], (raw - 0.1307f) / 0.3081f, 1e-5);
  }
  auto px2 = test->get(2, 0).at("image").to_vector<float>();
  EXPECT_NEAR(px2[5], (7.f / 255.f - 0.5f) / 0.25f, 1e-5);
  EXPECT_NE(train->describe().find("train-images-idx3-ubyte"), std::string::npos);
}

TEST(Mnist, BadInputs) {
  TempDir dir;
  expect_error<IoError>([&] { MnistDataset::open(dir.str(), "train"); },
                        {"train-images-idx3-ubyte", "tools/fetch_data.sh mnist"});
  expect_error<ConfigError>([&] { MnistDataset::open(dir.str(), "val"); },
                            {"'val'", "test, train"});
  write_mnist_like(dir.str(), "train", 30, false);
  write_mnist_like(dir.str(), "t10k", 12, false);
  const std::string ti = dir / "train-images-idx3-ubyte", tl = dir / "train-labels-idx1-ubyte";
  const std::string el = dir / "t10k-labels-idx1-ubyte";
  expect_error<IoError>([&] { MnistDataset(ti, el); }, {ti, el, "30 images", "12 labels"});
  expect_error<IoError>(
      [&] { MnistDataset(tl, tl); },
      {tl + "': rank 1 in the magic, expected 3; is it a labels file (rank 1: count) instead of "
            "an images file (rank 3: count, height, width)?"});
  expect_error<IoError>([&] { MnistDataset(ti, ti); },
                        {ti + "': rank 3 in the magic, expected 1; is it an images file"});
  // The kind is named before the size is checked: a labels magic on an images file's bytes is
  // not "N unexpected bytes".
  const std::string odd = dir / "odd-images-idx3-ubyte";
  std::vector<uint8_t> b = {0, 0, 0x08, 0x01, 0, 0, 0, 30};
  b.resize(b.size() + 30 * 28 * 28, 7);
  spit(odd, b);
  expect_error<IoError>([&] { MnistDataset(odd, tl); },
                        {odd + "': rank 1 in the magic, expected 3; is it a labels file"});
  expect_error<ConfigError>([&] { MnistDataset(ti, tl, MnistOptions{0.f, 0.f}); }, {"std"});
}

// A label the model cannot have fails at open, naming the file, the index and the fix (before,
// it trained until a batch drew it and then failed in cross_entropy, naming no file).
TEST(Mnist, LabelOutsideNumClassesFailsAtOpen) {
  TempDir dir;
  write_mnist_like(dir.str(), "train", 30, false);
  std::vector<uint8_t> labels(30, 3);
  labels[17] = 77;
  labels[21] = 12;
  const std::string tl = dir / "train-labels-idx1-ubyte";
  write_idx(tl, {30}, labels);
  MnistOptions opt;
  opt.num_classes = 10;
  expect_error<IoError>([&] { MnistDataset::open(dir.str(), "train", opt); },
                        {tl, "label 77 at index 17", "outside [0, 10)", "(1 more labels too)",
                         "model.num_classes to at least 78"});
  opt.num_classes = 78;  // now every label fits
  EXPECT_EQ(MnistDataset::open(dir.str(), "train", opt)->label_at(17), 77);
  opt.num_classes = 0;  // not checked
  EXPECT_EQ(MnistDataset::open(dir.str(), "train", opt)->size(), 30);
  opt.num_classes = -1;
  expect_error<ConfigError>([&] { MnistDataset::open(dir.str(), "train", opt); },
                            {"num_classes -1"});
}

TEST(Mnist, EmptySetOrEmptyImagesFailAtOpen) {
  TempDir dir;
  const std::string ti = dir / "train-images-idx3-ubyte", tl = dir / "train-labels-idx1-ubyte";
  write_idx(ti, {0, 28, 28}, {});
  write_idx(tl, {0}, {});
  expect_error<IoError>([&] { MnistDataset(ti, tl); }, {ti, "0 x 28 x 28", "hold no image"});
  write_idx(ti, {2, 0, 28}, {});
  write_idx(tl, {2}, {1, 2});
  expect_error<IoError>([&] { MnistDataset(ti, tl); }, {ti, "2 x 0 x 28"});
}

// The real files, when fetched. The skip message says how to fetch them.
TEST(Mnist, RealFiles) {
  const std::string dir = std::string(ADA_DATA_DIR) + "/mnist";
  ASSERT_TRUE(std::filesystem::exists(dir + "/train-images-idx3-ubyte"))
      << "MNIST not fetched into " << dir << "; run tools/fetch_data.sh mnist (tools/test.sh does)";
  auto train = MnistDataset::open(dir, "train");
  auto test = MnistDataset::open(dir, "test");
  EXPECT_EQ(train->size(), 60000);
  EXPECT_EQ(test->size(), 10000);
  EXPECT_EQ(train->height(), 28);
  EXPECT_EQ(train->width(), 28);
  std::vector<int64_t> first;
  for (int i = 0; i < 10; ++i) first.push_back(train->label_at(i));
  EXPECT_EQ(first, (std::vector<int64_t>{5, 0, 4, 1, 9, 2, 1, 3, 1, 4}));
  std::vector<int> hist(10);
  for (int64_t i = 0; i < train->size(); ++i) hist[train->label_at(i)]++;
  EXPECT_EQ(hist, (std::vector<int>{5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949}));
  // The default normalisation constants are MNIST's: the training set's mean/std map to ~0/1.
  double sum = 0, sq = 0;
  for (uint8_t v : train->pixels()) {
    double x = v / 255.0;
    sum += x;
    sq += x * x;
  }
  const double n = static_cast<double>(train->pixels().size());
  EXPECT_NEAR(sum / n, 0.1307, 1e-4);
  EXPECT_NEAR(std::sqrt(sq / n - (sum / n) * (sum / n)), 0.3081, 1e-4);
}

TEST(Mnist, RealFashionFiles) {
  const std::string dir = std::string(ADA_DATA_DIR) + "/fashion-mnist";
  ASSERT_TRUE(std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz"))
      << "Fashion-MNIST not fetched into " << dir
      << "; run tools/fetch_data.sh fashion-mnist (tools/test.sh does)";
  auto train = MnistDataset::open(dir, "train", MnistOptions::fashion());
  auto test = MnistDataset::open(dir, "test", MnistOptions::fashion());
  EXPECT_EQ(train->size(), 60000);
  EXPECT_EQ(test->size(), 10000);
  std::vector<int64_t> first;
  for (int i = 0; i < 10; ++i) first.push_back(train->label_at(i));
  EXPECT_EQ(first, (std::vector<int64_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5}));
  std::vector<int> hist(10);
  for (int64_t i = 0; i < test->size(); ++i) hist[test->label_at(i)]++;
  for (int h : hist) EXPECT_EQ(h, 1000);
}

}  // namespace
}  // namespace ada::data
