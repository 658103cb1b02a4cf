#include "data/image_folder_dataset.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <mutex>
#include <set>

#include "base/error.h"
#include "base/log.h"
#include "data/held_out.h"

namespace ada::data {

namespace fs = std::filesystem;

namespace {
std::string lower_extension(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext;
}
bool is_jpeg_name(const fs::path& p) {
  const std::string ext = lower_extension(p);
  return ext == ".jpg" || ext == ".jpeg";
}
// The other formats torchvision's ImageFolder reads (its IMG_EXTENSIONS).
bool is_other_image_name(const fs::path& p) {
  const std::string ext = lower_extension(p);
  return ext == ".png" || ext == ".ppm" || ext == ".bmp" || ext == ".pgm" || ext == ".tif" ||
         ext == ".tiff" || ext == ".webp";
}
}  // namespace

ImageFolderDataset::ImageFolderDataset(const std::string& root, ImageTransformOptions transform,
                                       uint64_t seed)
    : root_(root), opt_(transform), seed_(seed) {
  // The evaluation transform resizes, then crops; the training one crops, then resizes.
  ADA_CHECK_ARG(opt_.crop_size > 0 && (opt_.train || opt_.resize_size >= opt_.crop_size),
                ConfigError)
      << "image folder '" << root << "': crop_size " << opt_.crop_size << " and resize_size "
      << opt_.resize_size << " need 0 < crop_size <= resize_size";
  ADA_CHECK_ARG(opt_.scale_min > 0 && opt_.scale_min <= opt_.scale_max && opt_.scale_max <= 1.0 &&
                    opt_.ratio_min > 0 && opt_.ratio_min <= opt_.ratio_max,
                ConfigError)
      << "image folder '" << root << "': random-resized-crop needs 0 < scale_min <= scale_max <= 1 "
      << "and 0 < ratio_min <= ratio_max (got scale " << opt_.scale_min << ".." << opt_.scale_max
      << ", ratio " << opt_.ratio_min << ".." << opt_.ratio_max << ")";
  for (int c = 0; c < 3; ++c)
    ADA_CHECK_ARG(opt_.std[c] > 0, ConfigError)
        << "image folder '" << root << "': normalisation std[" << c << "] = " << opt_.std[c]
        << " must be > 0";
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    ADA_THROW(IoError) << "image folder '" << root
                       << "' does not exist or is not a folder; expected root/<class>/<image>.jpg";
  // What the folder has that this reader leaves out (torchvision's ImageFolder reads other image
  // formats and images in sub-folders of a class), said once, with one example of each.
  int64_t loose = 0, nested = 0, not_jpeg = 0;
  std::string loose_eg, nested_eg, not_jpeg_eg;
  const auto note = [](int64_t& count, std::string& example, const fs::path& p) {
    if (count++ == 0) example = p.string();
  };
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (entry.is_directory())
      classes_.push_back(entry.path().filename().string());
    else if (entry.is_regular_file() && is_jpeg_name(entry.path()))
      note(loose, loose_eg, entry.path());
  }
  if (ec)
    ADA_THROW(IoError) << "image folder '" << root << "': cannot list (" << ec.message() << ")";
  std::sort(classes_.begin(), classes_.end());
  if (classes_.empty())
    ADA_THROW(IoError) << "image folder '" << root
                       << "' has no class sub-folders; expected root/<class>/<image>.jpg";
  for (size_t c = 0; c < classes_.size(); ++c) {
    const fs::path dir = fs::path(root) / classes_[c];
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.is_regular_file() && is_jpeg_name(entry.path()))
        files.push_back(entry.path().string());
      else if (entry.is_directory())
        note(nested, nested_eg, entry.path());
      else if (entry.is_regular_file() && is_other_image_name(entry.path()))
        note(not_jpeg, not_jpeg_eg, entry.path());
    }
    if (ec)
      ADA_THROW(IoError) << "class folder '" << dir.string() << "': cannot list (" << ec.message()
                         << ")";
    if (files.empty())
      ADA_THROW(IoError) << "class folder '" << dir.string()
                         << "' holds no .jpg/.jpeg file; remove the folder or add its images "
                            "(an empty class would shift the labels of every later class)";
    std::sort(files.begin(), files.end());
    for (auto& f : files) {
      files_.push_back(std::move(f));
      labels_.push_back(static_cast<int64_t>(c));
    }
  }
  // Once a folder: the training folder is opened again for a validation split.
  static std::mutex warned_mu;
  static std::set<std::string> warned;
  {
    std::lock_guard<std::mutex> lock(warned_mu);
    if (!warned.insert(root).second) return;
  }
  if (loose > 0)
    log_warn(
        "image folder '{}': {} .jpg/.jpeg file(s) outside the class folders (e.g. '{}') are "
        "not read: an image belongs in root/<class>/",
        root, loose, loose_eg);
  if (nested > 0)
    log_warn(
        "image folder '{}': {} folder(s) inside class folders (e.g. '{}') are not read: "
        "only a class folder's own .jpg/.jpeg files are; move their images up a level",
        root, nested, nested_eg);
  if (not_jpeg > 0)
    log_warn(
        "image folder '{}': {} image(s) in another format than JPEG (e.g. '{}') are not "
        "read: only .jpg/.jpeg files are; convert them to JPEG",
        root, not_jpeg, not_jpeg_eg);
}

std::string ImageFolderDataset::describe() const {
  return "image folder '" + root_ + "' (" + std::to_string(files_.size()) + " images, " +
         std::to_string(classes_.size()) + " classes, " + (opt_.train ? "train" : "eval") +
         " transform)";
}

Example ImageFolderDataset::get(int64_t index, int64_t epoch) const {
  ADA_CHECK_ARG(index >= 0 && index < size(), ConfigError)
      << describe() << ": index " << index << " outside [0, " << size() << ")";
  const std::string& file = files_[static_cast<size_t>(index)];
  std::vector<uint8_t> bytes = read_file_bytes(file);
  Example ex;
  ex.set("image", transform_jpeg(bytes, file, opt_, example_generator(seed_, epoch, index)));
  Tensor label = Tensor::empty({}, DType::i64);
  *label.data<int64_t>() = labels_[static_cast<size_t>(index)];
  ex.set("label", std::move(label));
  return ex;
}

void check_image_folder_classes(const ImageFolderDataset& train, const ImageFolderDataset* eval,
                                int64_t num_classes) {
  const auto& tc = train.classes();
  if (eval) {
    const auto& ec = eval->classes();
    size_t i = 0;
    while (i < tc.size() && i < ec.size() && tc[i] == ec[i]) ++i;
    if (i < tc.size() || i < ec.size()) {
      // Name the first class that one folder has and the other lacks.
      const bool train_only = i < tc.size() && std::find(ec.begin(), ec.end(), tc[i]) == ec.end();
      const std::string& name = train_only || i >= ec.size() ? tc[i] : ec[i];
      const std::string& has = train_only || i >= ec.size() ? train.root() : eval->root();
      const std::string& lacks = train_only || i >= ec.size() ? eval->root() : train.root();
      ADA_THROW(IoError) << "image folders disagree: class " << i << " is '" << name << "' in '"
                         << has << "' but '" << lacks << "' has no folder '" << name << "' ("
                         << tc.size() << " training classes, " << ec.size()
                         << " evaluation classes; labels are positions in the sorted class "
                            "list, so every later label would shift); give both folders the "
                            "same class sub-folders";
    }
  }
  if (num_classes > 0 && static_cast<int64_t>(tc.size()) != num_classes)
    ADA_THROW(IoError) << "image folder '" << train.root() << "' has " << tc.size()
                       << " class folders but the model has " << num_classes
                       << " classes; set model.num_classes to " << tc.size()
                       << " or point data.path at a folder with " << num_classes << " classes";
}

DataSets read_image_folder(const DatasetRequest& request) {
  const Config& d = request.section;
  ImageTransformOptions train_t, eval_t;
  train_t.crop_size = eval_t.crop_size =
      d.get_in_or<int64_t>("crop_size", 224, Range::closed(1, 16384), "typical: 224");
  eval_t.resize_size = d.get_in_or<int64_t>("resize_size", 256, Range::closed(1, 16384),
                                            "evaluation's shorter side before its centre crop");
  ADA_CHECK_ARG(eval_t.resize_size >= eval_t.crop_size, ConfigError)
      << d.where("resize_size") << ": " << eval_t.resize_size << " is less than data.crop_size "
      << eval_t.crop_size
      << "; evaluation resizes the shorter side to resize_size, then crops crop_size from its "
         "centre: set resize_size >= crop_size (typical: 256 for 224)";
  train_t.resize_size = eval_t.resize_size;  // not used: training crops, then resizes
  eval_t.train = false;
  auto train = std::make_shared<ImageFolderDataset>(d.get_path("path"), train_t, request.seed);
  std::shared_ptr<ImageFolderDataset> eval;
  DataSets out;
  if (d.has("eval_path"))
    eval = std::make_shared<ImageFolderDataset>(d.get_path("eval_path"), eval_t, request.seed);
  else
    out.no_eval_reason = "data.eval_path is not set";
  check_image_folder_classes(*train, eval.get(), request.num_classes);
  out.train = train;
  out.eval = eval;
  // Files are sorted by class: the held-out images are spread over the whole list (every
  // class), and read with the evaluation transform.
  const int64_t n_val = read_validation_size(d, train->size(), train->describe());
  if (n_val > 0)
    hold_out_spread(out, n_val,
                    std::make_shared<ImageFolderDataset>(train->root(), eval_t, request.seed));
  return out;
}

}  // namespace ada::data
