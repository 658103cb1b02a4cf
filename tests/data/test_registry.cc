// A new data set is one file plus one registry line: this file holds a whole one (a Dataset of
// counting images and the reader of its section), the test registers it with one line and builds
// it from a config through read_datasets, as the trainer does. Also the built-in names.
#include <gtest/gtest.h>

#include "data/registry.h"

namespace ada::data {
namespace {

// ---- the new data set: one class and its reader ------------------------------------------------
// Image i is a 1 x 2 x 2 plane filled with i, labelled i mod classes.
class Counting : public Dataset {
 public:
  Counting(int64_t size, int64_t classes) : size_(size), classes_(classes) {}
  int64_t size() const override { return size_; }
  Example get(int64_t index, int64_t) const override {
    Example e;
    e.set("image", Tensor::full({1, 2, 2}, static_cast<double>(index)));
    e.set("label", Tensor::full({}, static_cast<double>(index % classes_), DType::i64));
    return e;
  }
  std::string describe() const override { return "counting (" + std::to_string(size_) + ")"; }

 private:
  int64_t size_, classes_;
};

DataSets read_counting(const DatasetRequest& r) {
  const int64_t size = r.section.get_in<int64_t>("size", Range::above(0));
  DataSets out;
  out.train = std::make_shared<Counting>(size, r.num_classes);
  out.no_eval_reason = "counting has no evaluation split";
  return out;
}
// ------------------------------------------------------------------------------------------------

TEST(DatasetRegistry, BuiltinNames) {
  DatasetRegistry r("data set");
  register_builtin_datasets(r);
  EXPECT_EQ(r.names(), (std::vector<std::string>{"fashion_mnist", "image_folder", "mlm", "mnist",
                                                 "squad", "synthetic", "text_classification"}));
}

TEST(DatasetRegistry, ANewDataSetIsOneFileAndOneLine) {
  DatasetRegistry r("data set");
  register_builtin_datasets(r);
  r.add("counting", read_counting);  // the one line
  Config root = Config::parse("{data: {name: counting, size: 5}, model: {name: lenet5}}", "t.yaml");
  const DataSets sets = read_datasets(r, {root.child("data"), root.child("model"), 3, 1});
  ASSERT_TRUE(sets.train);
  EXPECT_EQ(sets.train->size(), 5);
  EXPECT_EQ(sets.train->get(4, 0).at("label").to_vector<int64_t>()[0], 1);
  EXPECT_EQ(sets.eval, nullptr);
  EXPECT_EQ(sets.no_eval_reason, "counting has no evaluation split");

  Config bad = Config::parse("{data: {name: countin, size: 5}, model: {name: lenet5}}", "t.yaml");
  try {
    read_datasets(r, {bad.child("data"), bad.child("model"), 3, 1});
    ADD_FAILURE() << "an unknown name was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(
        std::string(e.what()).find("data.name (line 1, column 15): unknown data set 'countin'; "
                                   "known: counting, fashion_mnist, image_folder, mlm, "
                                   "mnist, squad, synthetic, text_classification (did you mean "
                                   "'counting'?)"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ada::data
