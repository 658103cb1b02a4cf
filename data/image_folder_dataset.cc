#include "data/image_folder_dataset.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "core/error.h"

namespace ada::data {

namespace fs = std::filesystem;

namespace {
bool is_jpeg_name(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg";
}
}  // namespace

ImageFolderDataset::ImageFolderDataset(const std::string& root, ImageTransformOptions transform,
                                       uint64_t seed)
    : root_(root), opt_(transform), seed_(seed) {
  ADA_CHECK_ARG(opt_.crop_size > 0 && opt_.resize_size >= opt_.crop_size, ConfigError)
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
  for (const auto& entry : fs::directory_iterator(root, ec))
    if (entry.is_directory()) classes_.push_back(entry.path().filename().string());
  if (ec)
    ADA_THROW(IoError) << "image folder '" << root << "': cannot list (" << ec.message() << ")";
  std::sort(classes_.begin(), classes_.end());
  if (classes_.empty())
    ADA_THROW(IoError) << "image folder '" << root
                       << "' has no class sub-folders; expected root/<class>/<image>.jpg";
  for (size_t c = 0; c < classes_.size(); ++c) {
    const fs::path dir = fs::path(root) / classes_[c];
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(dir, ec))
      if (entry.is_regular_file() && is_jpeg_name(entry.path()))
        files.push_back(entry.path().string());
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

}  // namespace ada::data
