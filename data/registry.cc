#include "data/registry.h"

#include <filesystem>

#include "base/error.h"
#include "base/log.h"

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
  const std::string path = section.get_path(key);
  std::error_code ec;
  ADA_CHECK_ARG(!std::filesystem::is_directory(path, ec), IoError)
      << section.where(key) << ": '" << path << "' is a folder; name " << expected;
  return path;
}

namespace {
// A path the config names that does not exist, said with the key and, for a relative one, the
// folder it was taken from (a config run from another folder than its own paths assume).
void check_exists(const Config& section, const std::string& key, const std::string& path) {
  std::error_code ec;
  if (path.empty() || std::filesystem::exists(path, ec)) return;
  const bool relative = std::filesystem::path(path).is_relative();
  ADA_THROW(IoError) << section.where(key) << ": '" << path << "' does not exist"
                     << (relative ? " (relative paths are taken from the working directory, " +
                                        std::filesystem::current_path(ec).string() +
                                        "; the shipped configs' from the repository's root)"
                                  : std::string())
                     << "; fetch the data (tools/fetch_data.sh) or fix the path";
}

// data.eval_path naming a file of data.path: its evaluation figures are training figures.
void warn_if_evaluated_on_training_data(const Config& d) {
  if (!d.has("path") || !d.has("eval_path") || process_rank() > 0) return;
  std::error_code ec;
  for (const std::string& e : d.get_paths("eval_path"))
    for (const std::string& t : d.get_paths("path"))
      if (std::filesystem::equivalent(e, t, ec) && !ec) {
        log_warn(
            "{}: '{}' is also training data (data.path); its evaluation figures measure "
            "the training set, not held-out data: name a file held out of the training "
            "data",
            d.where("eval_path"), e);
        return;
      }
}
}  // namespace

DataSets read_datasets(const DatasetRegistry& registry, const DatasetRequest& request) {
  const Config& d = request.section;
  const std::string name = d.get<std::string>("name");
  const auto& factory = registry.get(name, d.where("name"));
  warn_if_evaluated_on_training_data(d);
  try {
    return factory(request);
  } catch (const IoError&) {
    // A file it could not read: a path of the config that does not exist says why better.
    for (const char* key : {"path", "eval_path", "vocab"})
      if (d.has(key))  // a path, or a list of them (masked-LM shards)
        for (const std::string& p : d.get_paths(key)) check_exists(d, key, p);
    throw;
  }
}

const DatasetRegistry& builtin_datasets() {
  return builtin_registry<DatasetRegistry>("data set", register_builtin_datasets);
}

}  // namespace ada::data
