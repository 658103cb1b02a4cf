// SyntheticDataset: shapes, dtypes, ranges, determinism.
#include <gtest/gtest.h>

#include "data/synthetic_dataset.h"
#include "data_test_util.h"

namespace ada::data {
namespace {

TEST(Synthetic, ImagesShapeAndDeterminism) {
  auto ds = SyntheticDataset::images(100, 3, 32, 24, 10, 7);
  EXPECT_EQ(ds->size(), 100);
  Example a = ds->get(42, 0), b = ds->get(42, 5), c = ds->get(43, 0);
  EXPECT_EQ(a.at("image").shape(), (Shape{3, 32, 24}));
  EXPECT_EQ(a.at("label").shape(), Shape{});
  EXPECT_EQ(a.at("label").dtype(), DType::i64);
  EXPECT_EQ(a.at("image").to_vector<float>(), b.at("image").to_vector<float>());  // no epoch effect
  EXPECT_NE(a.at("image").to_vector<float>(), c.at("image").to_vector<float>());
  auto other_seed = SyntheticDataset::images(100, 3, 32, 24, 10, 8);
  EXPECT_NE(a.at("image").to_vector<float>(),
            other_seed->get(42, 0).at("image").to_vector<float>());
  double sum = 0, sq = 0;
  for (float v : a.at("image").to_vector<float>()) sum += v, sq += v * v;
  const double n = 3 * 32 * 24;
  EXPECT_NEAR(sum / n, 0.0, 0.1);
  EXPECT_NEAR(sq / n, 1.0, 0.15);
  std::vector<int> hist(10);
  for (int64_t i = 0; i < 100; ++i) {
    int64_t l = ds->get(i, 0).at("label").to_vector<int64_t>()[0];
    ASSERT_GE(l, 0);
    ASSERT_LT(l, 10);
    hist[l]++;
  }
  for (int h : hist) EXPECT_GT(h, 0);
}

TEST(Synthetic, TokensAndCustomFields) {
  auto ds = SyntheticDataset::tokens(10, 128, 30522, 1);
  Example ex = ds->get(3, 0);
  for (const char* f : {"input_ids", "segment_ids", "attention_mask", "labels"}) {
    EXPECT_EQ(ex.at(f).shape(), (Shape{128}));
    EXPECT_EQ(ex.at(f).dtype(), DType::i64);
  }
  for (int64_t v : ex.at("input_ids").to_vector<int64_t>()) {
    ASSERT_GE(v, 0);
    ASSERT_LT(v, 30522);
  }
  for (int64_t v : ex.at("segment_ids").to_vector<int64_t>()) ASSERT_TRUE(v == 0 || v == 1);
  for (int64_t v : ex.at("attention_mask").to_vector<int64_t>()) ASSERT_EQ(v, 1);
  int kept = 0;
  for (int64_t i = 0; i < 10; ++i)
    for (int64_t v : ds->get(i, 0).at("labels").to_vector<int64_t>()) {
      ASSERT_TRUE(v == -100 || (v >= 0 && v < 30522)) << v;
      kept += v != -100;
    }
  EXPECT_GT(kept, 1280 * 0.10);  // ~15% of 1280 positions
  EXPECT_LT(kept, 1280 * 0.20);
  SyntheticField f{"ids", {2, 3}, DType::i32};
  f.low = -5;
  f.high = -2;
  SyntheticDataset custom(4, {f, SyntheticField{"v", {7}, DType::f32, 10.0, 0.0}}, 0);
  Example e = custom.get(1, 0);
  for (int32_t v : e.at("ids").to_vector<int32_t>()) {
    EXPECT_GE(v, -5);
    EXPECT_LT(v, -2);
  }
  for (float v : e.at("v").to_vector<float>()) EXPECT_FLOAT_EQ(v, 10.f);
  testing::expect_error<ConfigError>(
      [] {
        SyntheticDataset(1, {SyntheticField{"a", {1}, DType::i64, 0, 1, 3, 3}});
      },
      {"'a'", "empty range"});
  testing::expect_error<ConfigError>(
      [] {
        SyntheticDataset(1, {SyntheticField{"a", {1}}, SyntheticField{"a", {1}}});
      },
      {"twice"});
}

}  // namespace
}  // namespace ada::data
