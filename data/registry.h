// The `data` section of a run config -> the training and evaluation sets. A data set is one file
// holding its Dataset and a reader of its section, plus one line in register_builtin_datasets()
// (data/registry.cc): mnist and fashion_mnist (mnist_dataset.cc), image_folder, mlm, squad,
// synthetic, text_classification.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "base/config.h"
#include "base/registry.h"
#include "data/dataset.h"

namespace ada::data {

struct DataSets {
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> eval;  // may be null: no evaluation
  std::string no_eval_reason;           // why eval is null, e.g. "data.eval_path is not set"
  // Held out of the training set by data.validation_size (data/held_out.h); null: none. Never
  // in `train`.
  std::shared_ptr<const Dataset> validation;
  // The hash of the vocabulary the token ids index (data/tokenizer.h's vocab_hash) for text data;
  // 0 for data without one. A checkpoint keeps it: weights trained on ids of another vocabulary
  // are refused (train.init_from, --resume).
  uint64_t vocab_hash = 0;
};

// What a reader gets: its section, and the model its examples must fit.
struct DatasetRequest {
  Config section;           // `data`
  Config model;             // `model` (BERT's vocab_size, max_positions and nsp)
  int64_t num_classes = 0;  // of the model's output; 0 for a model without classes (BERT)
  uint64_t seed = 1;        // train.seed
  // This rank among the ranks reading the data: files the reader checks whole (MLM shards) are
  // checked by one rank each, each rank's error stopping all (comm::stop_together).
  int rank = 0, world = 1;
};

// Builds and validates the sets on every rank, against the model too (labels inside its
// classes, token ids inside its vocabulary); errors name the file, the index and the fix.
using DatasetReader = std::function<DataSets(const DatasetRequest&)>;
using DatasetRegistry = Registry<DatasetReader>;

void register_builtin_datasets(DatasetRegistry& registry);
// The built-in data sets, registered once.
const DatasetRegistry& builtin_datasets();

// The file that the data section's key `key` names, refused (IoError naming the key) when it is
// a folder: `expected` says what the file is ("one JSON file (e.g. train-v1.1.json)").
std::string data_file(const Config& section, const std::string& key, const std::string& expected);

// The sets request.section's `name` asks for.
DataSets read_datasets(const DatasetRegistry& registry, const DatasetRequest& request);

}  // namespace ada::data
