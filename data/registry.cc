#include "data/registry.h"

#include <filesystem>

#include "base/error.h"

#include "data/image_folder_dataset.h"
#include "data/mlm_dataset.h"
#include "data/mnist_dataset.h"
#include "data/squad_dataset.h"
#include "data/synthetic_dataset.h"
#include "data/text_classification.h"

namespace ada::data {

void register_builtin_datasets(DatasetRegistry& r) {
  r.add("mnist", [](const DatasetRequest& q) { return read_mnist(q, false); });
  r.add("fashion_mnist", [](const DatasetRequest& q) { return read_mnist(q, true); });
  r.add("image_folder", read_image_folder);
  r.add("mlm", read_mlm);
  r.add("squad", read_squad_windows);
  r.add("synthetic", read_synthetic);
  r.add("text_classification", read_text_classification);
}

std::string data_file(const Config& section, const std::string& key, const std::string& expected) {
  const std::string path = section.get<std::string>(key);
  std::error_code ec;
  ADA_CHECK_ARG(!std::filesystem::is_directory(path, ec), IoError)
      << section.where(key) << ": '" << path << "' is a folder; name " << expected;
  return path;
}

DataSets read_datasets(const DatasetRegistry& registry, const DatasetRequest& request) {
  const std::string name = request.section.get<std::string>("name");
  return registry.get(name, request.section.where("name"))(request);
}

const DatasetRegistry& builtin_datasets() {
  return builtin_registry<DatasetRegistry>("data set", register_builtin_datasets);
}

}  // namespace ada::data
