// ImageFolderDataset: ImageNet-style folders, root/<class>/<file>.jpg, one sub-folder per class;
// class index = position of the folder name in byte-wise sorted order, files sorted within a
// class. Examples: "image" f32 [3, crop, crop] through the train or eval transform
// (image_transforms.h), "label" i64 scalar. Files are read and decoded in get(), so memory stays
// small; augmentation depends only on (seed, epoch, index).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/image_transforms.h"
#include "data/registry.h"

namespace ada::data {

class ImageFolderDataset : public Dataset {
 public:
  // Scans `root`. Files ending .jpg/.jpeg (any case) count; other files are ignored. IoError
  // naming the folder if root is missing or has no class folders, or if a class folder holds no
  // JPEG file (an empty class would silently shift every later class index).
  ImageFolderDataset(const std::string& root, ImageTransformOptions transform, uint64_t seed = 0);

  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  // IoError naming the file if it cannot be read or decoded.
  Example get(int64_t index, int64_t epoch) const override;
  std::string describe() const override;

  const std::string& root() const { return root_; }
  const std::vector<std::string>& classes() const { return classes_; }
  const std::string& path(int64_t index) const { return files_[static_cast<size_t>(index)]; }
  int64_t label(int64_t index) const { return labels_[static_cast<size_t>(index)]; }
  const ImageTransformOptions& transform() const { return opt_; }

 private:
  std::string root_;
  ImageTransformOptions opt_;
  uint64_t seed_;
  std::vector<std::string> classes_;
  std::vector<std::string> files_;
  std::vector<int64_t> labels_;
};

// What a model and an evaluation set need of a training folder: `num_classes` class folders
// (when > 0), and, when `eval` is given, the very same class names as `train` (eval classes are
// listed independently, so a class missing from one folder would silently shift the labels of
// every later class). IoError naming both folders, the first class index that differs and the
// fix.
void check_image_folder_classes(const ImageFolderDataset& train, const ImageFolderDataset* eval,
                                int64_t num_classes);

// data.name image_folder: data.path, data.eval_path (class folders of JPEGs), data.crop_size
// (224), data.resize_size (256, evaluation).
DataSets read_image_folder(const DatasetRequest& request);

}  // namespace ada::data
