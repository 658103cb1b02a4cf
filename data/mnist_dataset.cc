#include "data/mnist_dataset.h"

#include "data/held_out.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "data/idx.h"

namespace ada::data {

MnistDataset::MnistDataset(const std::string& images_path, const std::string& labels_path,
                           MnistOptions options)
    : images_path_(images_path), opt_(options) {
  ADA_CHECK_ARG(opt_.std > 0.f, ConfigError)
      << "MNIST dataset '" << images_path << "': normalisation std " << opt_.std << " must be > 0";
  IdxArray images = read_idx(images_path, 3);
  IdxArray labels = read_idx(labels_path, 1);
  if (images.dims[0] != labels.dims[0])
    ADA_THROW(IoError) << "MNIST files disagree: '" << images_path << "' has " << images.dims[0]
                       << " images but '" << labels_path << "' has " << labels.dims[0]
                       << " labels; they must come from the same split";
  if (images.dims[0] == 0 || images.dims[1] == 0 || images.dims[2] == 0)
    ADA_THROW(IoError) << "IDX file '" << images_path << "': dimensions " << images.dims[0] << " x "
                       << images.dims[1] << " x " << images.dims[2]
                       << " hold no image; the file is empty or corrupt: fetch it again";
  ADA_CHECK_ARG(opt_.num_classes >= 0, ConfigError)
      << "MNIST dataset '" << images_path << "': num_classes " << opt_.num_classes
      << " must be >= 0 (0: labels not checked)";
  if (opt_.num_classes > 0) {
    // Every label now, not when a batch first draws it: a bad label would otherwise stop the run
    // hours later, inside the loss, naming no file.
    int64_t bad = 0, first = -1, largest = 0;
    for (size_t i = 0; i < labels.data.size(); ++i)
      if (labels.data[i] >= opt_.num_classes) {
        if (first < 0) first = static_cast<int64_t>(i);
        largest = std::max<int64_t>(largest, labels.data[i]);
        ++bad;
      }
    if (bad > 0) {
      const int label = labels.data[static_cast<size_t>(first)];
      ADA_THROW(IoError) << "IDX file '" << labels_path << "': label " << label << " at index "
                         << first << " is outside [0, " << opt_.num_classes << ") for a model of "
                         << opt_.num_classes << " classes"
                         << (bad > 1 ? " (" + std::to_string(bad - 1) + " more labels too)" : "")
                         << "; fix the labels file (fetch it again with tools/fetch_data.sh) or "
                            "set model.num_classes to at least "
                         << largest + 1;
    }
  }
  count_ = images.dims[0];
  height_ = images.dims[1];
  width_ = images.dims[2];
  pixels_ = std::move(images.data);
  labels_ = std::move(labels.data);
  for (int v = 0; v < 256; ++v) lut_[v] = (static_cast<float>(v) / 255.f - opt_.mean) / opt_.std;
}

std::shared_ptr<MnistDataset> MnistDataset::open(const std::string& dir, const std::string& split,
                                                 MnistOptions options) {
  std::string prefix;
  if (split == "train")
    prefix = "train";
  else if (split == "test" || split == "t10k")
    prefix = "t10k";
  else
    ADA_THROW(ConfigError) << "MNIST split '" << split << "' unknown; known: test, train";
  namespace fs = std::filesystem;
  auto find = [&](const std::string& stem) {
    for (const std::string& name : {stem, stem + ".gz"}) {
      fs::path p = fs::path(dir) / name;
      if (fs::exists(p)) return p.string();
    }
    ADA_THROW(IoError) << "MNIST: neither '" << (fs::path(dir) / stem).string() << "' nor '"
                       << (fs::path(dir) / (stem + ".gz")).string()
                       << "' exists; run tools/fetch_data.sh mnist (or fashion-mnist) or point "
                          "the data path at a folder holding the IDX files";
  };
  std::string images = find(prefix + "-images-idx3-ubyte");
  std::string labels = find(prefix + "-labels-idx1-ubyte");
  return std::make_shared<MnistDataset>(images, labels, options);
}

std::string MnistDataset::describe() const {
  return "IDX images '" + images_path_ + "' (" + std::to_string(count_) + " examples)";
}

Example MnistDataset::get(int64_t index, int64_t /*epoch*/) const {
  ADA_CHECK_ARG(index >= 0 && index < count_, ConfigError)
      << describe() << ": index " << index << " outside [0, " << count_ << ")";
  const int64_t n = height_ * width_;
  Tensor image = Tensor::empty({1, height_, width_});
  float* dst = image.data<float>();
  const uint8_t* src = pixels_.data() + index * n;
  for (int64_t i = 0; i < n; ++i) dst[i] = lut_[src[i]];
  Tensor label = Tensor::empty({}, DType::i64);
  *label.data<int64_t>() = labels_[static_cast<size_t>(index)];
  Example ex;
  ex.set("image", std::move(image));
  ex.set("label", std::move(label));
  return ex;
}

DataSets read_mnist(const DatasetRequest& request, bool fashion) {
  const Config& d = request.section;
  const std::string dir = d.get_path_or("path", fashion ? "data/fashion-mnist" : "data/mnist");
  MnistOptions o = fashion ? MnistOptions::fashion() : MnistOptions{};
  // Of the pixels scaled to [0, 1] (x / 255), as torchvision's Normalize after ToTensor.
  o.mean = static_cast<float>(d.get_in_or<double>("mean", o.mean, Range::closed(0, 1),
                                                  "of the pixels / 255: MNIST's 0.1307"));
  o.std = static_cast<float>(d.get_in_or<double>("std", o.std, Range{0, 1, true, false},
                                                 "of the pixels / 255: MNIST's 0.3081"));
  o.num_classes = request.num_classes;
  DataSets out;
  auto train = MnistDataset::open(dir, "train", o);
  out.train = train;
  if (d.get_or<bool>("eval", true)) {
    auto test = MnistDataset::open(dir, "test", o);
    ADA_CHECK_ARG(test->height() == train->height() && test->width() == train->width(), IoError)
        << "data: " << test->describe() << " holds " << test->height() << "x" << test->width()
        << " images but " << train->describe() << " holds " << train->height() << "x"
        << train->width() << "; both splits must come from one data set (" << d.where("path")
        << ")";
    out.eval = test;
  } else {
    out.no_eval_reason = d.where("eval") + " is false";
  }
  // The last N training images (MNIST's are in no particular order).
  hold_out_tail(out, read_validation_size(d, train->size(), train->describe()));
  return out;
}

}  // namespace ada::data
