// Validation splits (data/held_out.h, data.validation_size): the held-out examples never reach a
// training batch (any rank, any epoch, any seed), the split is the same on every read, bad
// values are refused naming the key as written, and the readers split as they say (MNIST's last
// N images, image folders spread over every class).
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "data/data_loader.h"
#include "data/distributed_sampler.h"
#include "data/held_out.h"
#include "data/image_folder_dataset.h"
#include "data/mnist_dataset.h"
#include "data/registry.h"
#include "data_test_util.h"

namespace ada::data {
namespace {

using testing::expect_error;
using testing::TempDir;

// Example i carries its own index: "id" i64 = i, and an image filled with i.
class Ids : public Dataset {
 public:
  explicit Ids(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Example get(int64_t index, int64_t) const override {
    Example e;
    e.set("id", Tensor::full({}, static_cast<double>(index), DType::i64));
    e.set("image", Tensor::full({1, 2, 2}, static_cast<double>(index)));
    return e;
  }

 private:
  int64_t n_;
};

// Every base index that `sets.train` hands to training batches, over `ranks` ranks and
// `epochs` epochs with `seed`, as the trainer's loader makes them (shuffled, drop_last).
std::set<int64_t> trained_ids(const DataSets& sets, int ranks, int epochs, uint64_t seed) {
  std::set<int64_t> seen;
  for (int r = 0; r < ranks; ++r) {
    DataLoader loader(sets.train,
                      DistributedSampler(sets.train->size(), {r, ranks, seed, true, true}),
                      {.batch_size = 4, .num_workers = 2, .drop_last_batch = true});
    for (int e = 0; e < epochs; ++e) {
      loader.start_epoch(e);
      while (auto b = loader.next())
        for (int64_t id : b->at("id").to_vector<int64_t>()) seen.insert(id);
    }
  }
  return seen;
}

std::vector<int64_t> all_ids(const Dataset& set) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < set.size(); ++i)
    out.push_back(set.get(i, 0).at("id").to_vector<int64_t>()[0]);
  return out;
}

TEST(HeldOut, TheTailIsNeverTrainedOn) {
  for (uint64_t seed : {1u, 2u, 7u}) {
    DataSets sets;
    sets.train = std::make_shared<Ids>(103);
    hold_out_tail(sets, 20);
    ASSERT_EQ(sets.validation->size(), 20);
    ASSERT_EQ(sets.train->size(), 83);
    std::vector<int64_t> tail;
    for (int64_t i = 83; i < 103; ++i) tail.push_back(i);
    EXPECT_EQ(all_ids(*sets.validation), tail);
    const std::set<int64_t> seen = trained_ids(sets, 3, 4, seed);
    ASSERT_FALSE(seen.empty());
    EXPECT_LT(*seen.rbegin(), 83) << "a held-out example reached a training batch";
    // Over 4 epochs every training example is drawn at least once (drop_last loses 3 a rank).
    EXPECT_GT(seen.size(), 70u);
  }
}

TEST(HeldOut, ATrainingEndBeforeTheTailLeavesAGapInNeither) {
  DataSets sets;
  sets.train = std::make_shared<Ids>(50);
  hold_out_tail(sets, 10, 35);  // examples 35..39 share a document with the validation set
  EXPECT_EQ(sets.train->size(), 35);
  EXPECT_EQ(all_ids(*sets.validation).front(), 40);
  EXPECT_LT(*trained_ids(sets, 2, 3, 1).rbegin(), 35);
  DataSets none;
  none.train = std::make_shared<Ids>(50);
  hold_out_tail(none, 0);
  EXPECT_EQ(none.validation, nullptr);
  EXPECT_EQ(none.train->size(), 50);
}

TEST(HeldOut, SpreadTakesNEvenlyAndTrainsOnTheRest) {
  DataSets sets;
  sets.train = std::make_shared<Ids>(100);
  hold_out_spread(sets, 10);
  const std::vector<int64_t> val = all_ids(*sets.validation);
  EXPECT_EQ(val, (std::vector<int64_t>{9, 19, 29, 39, 49, 59, 69, 79, 89, 99}));
  const std::vector<int64_t> train = all_ids(*sets.train);
  EXPECT_EQ(train.size(), 90u);
  const std::set<int64_t> trained = trained_ids(sets, 2, 3, 5);
  for (int64_t v : val) EXPECT_EQ(trained.count(v), 0u) << v;
  // 7 of 30: every example is in exactly one of the two.
  DataSets odd;
  odd.train = std::make_shared<Ids>(30);
  hold_out_spread(odd, 7);
  std::vector<int64_t> both = all_ids(*odd.validation), rest = all_ids(*odd.train);
  EXPECT_EQ(both.size(), 7u);
  both.insert(both.end(), rest.begin(), rest.end());
  std::sort(both.begin(), both.end());
  for (int64_t i = 0; i < 30; ++i) EXPECT_EQ(both[static_cast<size_t>(i)], i);
}

DataSets read(const std::string& yaml, int64_t classes = 10, uint64_t seed = 1) {
  static std::vector<Config> keep;  // the sections must outlive the read
  keep.push_back(Config::parse(yaml, "v.yaml"));
  const Config& root = keep.back();
  return read_datasets(builtin_datasets(),
                       {root.child("data"), root.child("model"), classes, seed});
}

TEST(HeldOut, SyntheticSplitsTheSameWayOnEveryRead) {
  const std::string y =
      "{data: {name: synthetic, size: 64, eval_size: 16, validation_size: 8}, model: {name: "
      "lenet5}}";
  const DataSets a = read(y), b = read(y);
  ASSERT_TRUE(a.validation && a.eval);
  EXPECT_EQ(a.train->size(), 56);
  EXPECT_EQ(a.validation->size(), 8);
  EXPECT_EQ(a.eval->size(), 16);
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(a.validation->get(i, 0).at("image").to_vector<float>(),
              b.validation->get(i, 0).at("image").to_vector<float>());
    EXPECT_EQ(a.validation->get(i, 0).at("label").to_vector<int64_t>()[0],
              b.validation->get(i, 0).at("label").to_vector<int64_t>()[0]);
  }
  EXPECT_NE(a.validation->describe().find("validation: 8 examples (56-63) of"), std::string::npos)
      << a.validation->describe();
  // Not set, or 0: no validation set.
  EXPECT_EQ(read("{data: {name: synthetic, size: 64}, model: {name: lenet5}}").validation, nullptr);
  EXPECT_EQ(read("{data: {name: synthetic, size: 64, validation_size: 0}, model: {name: lenet5}}")
                .validation,
            nullptr);
}

// Synthetic MLM sequences choose round(15%) of their positions each (every batch one shape, as
// CUDA graphs need), at positions that differ between sequences.
TEST(HeldOut, SyntheticMlmChoosesOneCountASequence) {
  const DataSets d =
      read("{data: {name: synthetic, size: 40, seq_len: 40}, model: {name: bert}}", 0);
  std::set<std::vector<int64_t>> patterns;
  for (int64_t i = 0; i < 40; ++i) {
    const std::vector<int64_t> labels = d.train->get(i, 0).at("labels").to_vector<int64_t>();
    std::vector<int64_t> where;
    for (size_t k = 0; k < labels.size(); ++k)
      if (labels[k] != -100) where.push_back(static_cast<int64_t>(k));
    EXPECT_EQ(where.size(), 6u) << "sequence " << i;  // 0.15 x 40
    patterns.insert(where);
  }
  EXPECT_GE(patterns.size(), 39u);
}

TEST(HeldOut, BadValuesNameTheKeyAsWritten) {
  auto bad = [](const std::string& v, std::initializer_list<std::string> parts) {
    expect_error<ConfigError>(
        [&] {
          read("{data: {name: synthetic, size: 64, validation_size: " + v +
               "}, model: {name: lenet5}}");
        },
        parts);
  };
  bad("64", {"data.validation_size (line 1, column 53): must be in [0, 64), got 64",
             "at least one must stay for training (a tenth of them is 6)"});
  bad("100000000", {"must be in [0, 64), got 100000000;"});
  bad("-5", {"data.validation_size (line 1, column 53): must be in [0, 64), got -5"});
  bad("lots", {"data.validation_size (line 1, column 53)"});
  bad("0.5", {"data.validation_size (line 1, column 53)"});
  // From --set, the message says so.
  Config root =
      Config::parse("{data: {name: synthetic, size: 64}, model: {name: lenet5}}", "v.yaml");
  root.set_override("data.validation_size=100");
  expect_error<ConfigError>(
      [&] {
        read_datasets(builtin_datasets(), {root.child("data"), root.child("model"), 10, 1});
      },
      {"data.validation_size (set by --set data.validation_size=100): must be in [0, 64), got "
       "100"});
}

TEST(HeldOut, ImageFoldersHoldOutEveryClassWithTheEvalTransform) {
  TempDir dir;
  for (int c = 0; c < 3; ++c) {
    std::filesystem::create_directories(dir / ("train/c" + std::to_string(c)));
    for (int i = 0; i < 4; ++i)
      write_jpeg(dir / ("train/c" + std::to_string(c) + "/" + std::to_string(i) + ".jpg"),
                 testing::pattern_image(40, 48, c * 4 + i), 95);
  }
  const DataSets sets = read("{data: {name: image_folder, path: " + (dir / "train") +
                                 ", crop_size: 16, resize_size: 20, validation_size: 3}, "
                                 "model: {name: resnet18}}",
                             3);
  ASSERT_TRUE(sets.validation);
  EXPECT_EQ(sets.train->size(), 9);
  auto& val = dynamic_cast<const SubsetDataset&>(*sets.validation);
  std::set<int64_t> labels;
  for (int64_t i = 0; i < 3; ++i) labels.insert(val.get(i, 0).at("label").to_vector<int64_t>()[0]);
  EXPECT_EQ(labels, (std::set<int64_t>{0, 1, 2})) << "one held-out image of every class";
  // The evaluation transform: the same image in every epoch (no random crop or flip).
  EXPECT_EQ(val.get(0, 0).at("image").to_vector<float>(),
            val.get(0, 5).at("image").to_vector<float>());
  EXPECT_FALSE(dynamic_cast<const ImageFolderDataset&>(val.base()).transform().train);
}

// The real MNIST files, when fetched: the last 5000 training images, the same on every read.
TEST(HeldOut, MnistHoldsOutItsLast5000TrainingImages) {
  const std::string dir = std::string(ADA_DATA_DIR) + "/mnist";
  ASSERT_TRUE(std::filesystem::exists(dir + "/train-images-idx3-ubyte"))
      << "MNIST not fetched into " << dir << "; run tools/fetch_data.sh mnist (tools/test.sh does)";
  const DataSets sets = read("{data: {name: mnist, path: " + dir +
                             ", validation_size: 5000}, model: {name: lenet5}}");
  ASSERT_TRUE(sets.validation && sets.eval);
  EXPECT_EQ(sets.train->size(), 55000);
  EXPECT_EQ(sets.validation->size(), 5000);
  EXPECT_EQ(sets.eval->size(), 10000);
  const auto full = MnistDataset::open(dir, "train");
  for (int64_t i : {0, 1234, 4999})
    EXPECT_EQ(sets.validation->get(i, 0).at("image").to_vector<float>(),
              full->get(55000 + i, 0).at("image").to_vector<float>());
  EXPECT_EQ(sets.train->get(54999, 0).at("label").to_vector<int64_t>()[0], full->label_at(54999));
}

}  // namespace
}  // namespace ada::data
