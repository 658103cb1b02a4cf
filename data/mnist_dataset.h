// MnistDataset: MNIST-format image classification sets (MNIST, Fashion-MNIST) read from a pair of
// IDX files, raw or gzipped, held in memory as bytes. Examples: "image" f32 [1, H, W] with
// (x/255 - mean)/std, "label" i64 scalar. No augmentation, so get() ignores the epoch.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/registry.h"

namespace ada::data {

struct MnistOptions {
  float mean = 0.1307f;  // MNIST's pixel mean and std over the training set (x/255)
  float std = 0.3081f;
  // The model's classes: every label must lie in [0, num_classes). 0: labels are not checked.
  int64_t num_classes = 0;
  static MnistOptions fashion() { return {0.2860f, 0.3530f}; }  // Fashion-MNIST's
};

class MnistDataset : public Dataset {
 public:
  // Reads an images file (rank 3: N, H, W) and a labels file (rank 1: N) and checks them whole:
  // IoError naming the file on any malformed input (see read_idx), an empty set or images of
  // size 0, counts that differ, or (with options.num_classes) a label outside [0, num_classes),
  // naming its index and the fix. ConfigError if std <= 0 or num_classes < 0.
  MnistDataset(const std::string& images_path, const std::string& labels_path,
               MnistOptions options = {});
  // The split "train" or "test" ("t10k") of the standard file names inside `dir`:
  // {train,t10k}-{images-idx3,labels-idx1}-ubyte, each raw or with ".gz". IoError naming the
  // paths tried and how to fetch them when absent.
  static std::shared_ptr<MnistDataset> open(const std::string& dir, const std::string& split,
                                            MnistOptions options = {});

  int64_t size() const override { return count_; }
  Example get(int64_t index, int64_t epoch) const override;
  std::string describe() const override;

  int64_t height() const { return height_; }
  int64_t width() const { return width_; }
  int64_t label_at(int64_t index) const { return labels_[static_cast<size_t>(index)]; }
  const std::vector<uint8_t>& pixels() const { return pixels_; }  // [N, H, W] bytes

 private:
  std::string images_path_;
  MnistOptions opt_;
  int64_t count_ = 0, height_ = 0, width_ = 0;
  std::vector<uint8_t> pixels_;
  std::vector<uint8_t> labels_;
  float lut_[256];  // byte -> normalised value
};

// data.name mnist / fashion_mnist: data.path (an IDX folder, default data/mnist or
// data/fashion-mnist), data.mean, data.std, data.eval (true: the test split evaluates).
DataSets read_mnist(const DatasetRequest& request, bool fashion);

}  // namespace ada::data
