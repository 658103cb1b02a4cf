// DataLoader: same batches whatever the worker count, errors re-thrown on the caller's thread
// with the file named, early stop and destruction without hangs, resume from state().
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "data/data_loader.h"
#include "data/synthetic_dataset.h"
#include "data_test_util.h"

namespace ada::data {
namespace {

// Example i of epoch e: "x" f32 [3] with random values from example_generator (so it changes
// with the epoch), "label" i64 = i. Sleeps a pseudo-random time so workers finish out of order.
class NoisyDataset : public Dataset {
 public:
  NoisyDataset(int64_t n, uint64_t seed, int64_t bad_index = -1)
      : n_(n), seed_(seed), bad_(bad_index) {}
  int64_t size() const override { return n_; }
  Example get(int64_t index, int64_t epoch) const override {
    calls++;
    if (index == bad_) ADA_THROW(IoError) << "file 'shard_0007.bin': bad header";
    Generator g = example_generator(seed_, epoch, index);
    std::this_thread::sleep_for(std::chrono::microseconds(
        static_cast<int>(Generator::uniform_at(g.seed(), g.offset(), 99) * 300)));
    Example ex;
    Tensor x = Tensor::empty({3});
    for (int i = 0; i < 3; ++i) x.data<float>()[i] = Generator::uniform_at(g.seed(), g.offset(), i);
    ex.set("x", x);
    ex.set("label", Tensor::full({}, static_cast<double>(index), DType::i64));
    return ex;
  }
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t n_;
  uint64_t seed_;
  int64_t bad_;
};

struct Flat {
  std::vector<float> x;
  std::vector<int64_t> labels;
  std::vector<int64_t> sizes;
  bool operator==(const Flat&) const = default;
};

Flat run_epoch(DataLoader& loader, int64_t epoch) {
  loader.start_epoch(epoch);
  Flat f;
  while (auto b = loader.next()) {
    f.sizes.push_back(b->size());
    EXPECT_EQ(b->at("x").shape(), (Shape{b->size(), 3}));
    EXPECT_EQ(b->at("label").shape(), (Shape{b->size()}));
    auto x = b->at("x").to_vector<float>();
    auto l = b->at("label").to_vector<int64_t>();
    EXPECT_EQ(l, b->indices);
    f.x.insert(f.x.end(), x.begin(), x.end());
    f.labels.insert(f.labels.end(), l.begin(), l.end());
  }
  return f;
}

TEST(Loader, SameBatchesWhateverTheWorkerCount) {
  auto ds = std::make_shared<NoisyDataset>(103, 17);
  std::vector<Flat> results[2];
  for (int workers : {0, 1, 2, 3, 5}) {
    DataLoader loader(ds, DistributedSampler(103, {1, 2, 9, true, false}), {8, workers, 0, false});
    EXPECT_EQ(loader.batches_per_epoch(), 7);  // 52 examples on this rank: 6 x 8 + 4
    for (int e = 0; e < 2; ++e) results[e].push_back(run_epoch(loader, e));
  }
  for (int e = 0; e < 2; ++e)
    for (size_t k = 1; k < results[e].size(); ++k) EXPECT_TRUE(results[e][k] == results[e][0]) << k;
  // Epochs differ in order and in the per-example randomness.
  EXPECT_NE(results[0][0].labels, results[1][0].labels);
  EXPECT_EQ(results[0][0].sizes, (std::vector<int64_t>{8, 8, 8, 8, 8, 8, 4}));
  // The rows are exactly this rank's sampler order.
  DistributedSampler s(103, {1, 2, 9, true, false});
  EXPECT_EQ(results[0][0].labels, s.epoch_indices());
}

TEST(Loader, DropLastBatch) {
  auto ds = std::make_shared<NoisyDataset>(20, 1);
  DataLoader loader(ds, DistributedSampler(20, {0, 1, 0, false}), {6, 2, 0, true});
  EXPECT_EQ(loader.batches_per_epoch(), 3);
  Flat f = run_epoch(loader, 0);
  EXPECT_EQ(f.sizes, (std::vector<int64_t>{6, 6, 6}));
}

TEST(Loader, WorkerErrorIsRethrownInOrderNamingTheFile) {
  for (int workers : {0, 1, 3}) {
    auto ds = std::make_shared<NoisyDataset>(40, 3, /*bad_index=*/21);
    DataLoader loader(ds, DistributedSampler(40, {0, 1, 0, false}), {4, workers, 0, false});
    loader.start_epoch(0);
    int delivered = 0;
    try {
      while (loader.next()) ++delivered;
      ADD_FAILURE() << "no error with " << workers << " workers";
    } catch (const IoError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("shard_0007.bin"), std::string::npos) << msg;
      EXPECT_NE(msg.find("bad header"), std::string::npos) << msg;
      EXPECT_NE(msg.find("example index 21"), std::string::npos) << msg;
      EXPECT_NE(msg.find("batch 5"), std::string::npos) << msg;
    }
    EXPECT_EQ(delivered, 5) << workers << " workers";  // batches 0..4 arrive first, in order
    EXPECT_FALSE(loader.next().has_value());           // the epoch is over after an error
    // A new epoch works again up to the same point.
    loader.start_epoch(0);
    EXPECT_TRUE(loader.next().has_value());
  }
}

TEST(Loader, StackingErrorNamesTheField) {
  class Ragged : public Dataset {
   public:
    int64_t size() const override { return 4; }
    Example get(int64_t i, int64_t) const override {
      Example ex;
      ex.set("tokens", Tensor::zeros({i == 2 ? 5 : 4}, DType::i64));
      return ex;
    }
  };
  DataLoader loader(std::make_shared<Ragged>(), DistributedSampler(4, {0, 1, 0, false}),
                    {4, 1, 0, false});
  testing::expect_error<ShapeError>([&] { loader.next(); },
                                    {"field 'tokens'", "[5]", "example 2", "[4]", "stacking"});
}

TEST(Loader, EarlyStopAndDestructionDoNotHang) {
  auto ds = std::make_shared<NoisyDataset>(2000, 5);
  for (int workers : {1, 2, 4}) {
    auto loader = std::make_unique<DataLoader>(ds, DistributedSampler(2000, {0, 1, 0, true}),
                                               LoaderOptions{4, workers, 3, false});
    ASSERT_TRUE(loader->next().has_value());
    loader->start_epoch(1);  // abandons the rest of epoch 0
    ASSERT_TRUE(loader->next().has_value());
    loader.reset();  // consumer leaves mid-epoch
  }
  // Bounded prefetch: with prefetch 3 and a consumer that stops, few examples were read.
  auto counted = std::make_shared<NoisyDataset>(2000, 5);
  {
    DataLoader loader(counted, DistributedSampler(2000, {0, 1, 0, true}), {4, 2, 3, false});
    loader.next();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_LE(counted->calls.load(), 4 * (1 + 3 + 2));
  }
}

TEST(Loader, ResumeFromState) {
  auto ds = std::make_shared<NoisyDataset>(50, 2);
  DistributedSampler sampler(50, {0, 1, 4, true, false});
  DataLoader a(ds, sampler, {7, 2, 0, false});
  a.start_epoch(3);
  a.next();
  a.next();
  SamplerState st = a.state();
  EXPECT_EQ(st.epoch, 3);
  EXPECT_EQ(st.position, 14);
  std::vector<std::vector<int64_t>> rest_a, rest_b;
  while (auto b = a.next()) rest_a.push_back(b->indices);
  DataLoader b(ds, sampler, {7, 0, 0, false});
  b.restore(st);
  while (auto x = b.next()) rest_b.push_back(x->indices);
  EXPECT_EQ(rest_a, rest_b);
  EXPECT_EQ(rest_a.size(), 6u);  // 36 left: 5 x 7 + 1
  EXPECT_EQ(a.state().position, 50);
}

TEST(Loader, BadOptions) {
  auto ds = std::make_shared<NoisyDataset>(10, 0);
  testing::expect_error<ConfigError>(
      [&] {
        DataLoader(ds, DistributedSampler(10), {0, 0, 0, false});
      },
      {"batch_size 0"});
  testing::expect_error<ConfigError>(
      [&] {
        DataLoader(ds, DistributedSampler(11), {2, 0, 0, false});
      },
      {"11", "10"});
}

TEST(StackExamples, ScalarsAndTensors) {
  auto ds = SyntheticDataset::images(5, 2, 3, 4, 10, 1);
  std::vector<Example> ex = {ds->get(0, 0), ds->get(3, 0)};
  Batch b = stack_examples(ex, {0, 3});
  EXPECT_EQ(b.at("image").shape(), (Shape{2, 2, 3, 4}));
  EXPECT_EQ(b.at("label").shape(), (Shape{2}));
  EXPECT_EQ(b.at("label").to_vector<int64_t>()[1], ex[1].at("label").to_vector<int64_t>()[0]);
  auto img = b.at("image").to_vector<float>();
  auto img1 = ex[1].at("image").to_vector<float>();
  EXPECT_TRUE(std::equal(img1.begin(), img1.end(), img.begin() + 24));
  testing::expect_error<ShapeError>([&] { b.at("imagee"); }, {"'imagee'", "image, label"});
}

}  // namespace
}  // namespace ada::data
