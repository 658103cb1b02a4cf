// The `data` section of a run config -> the training and evaluation datasets.
// Names: mnist, fashion_mnist (IDX folders), image_folder (ImageNet-style JPEG folders),
// mlm (token shards from prepare_mlm), synthetic (any shapes; for throughput and smoke runs).
// A new data set is one class in data/ plus one branch here.
#pragma once

#include <memory>
#include <string>

#include "base/config.h"
#include "data/dataset.h"

namespace ada::trainer {

struct DataSets {
  std::shared_ptr<const data::Dataset> train;
  std::shared_ptr<const data::Dataset> eval;  // may be null: no evaluation
  std::string eval_metric;                    // "top1" or "mlm" (what the model reports)
  std::string no_eval_reason;                 // why eval is null, e.g. "data.eval_path is not set"
};

// Builds and validates both sets on every rank, against the model too: labels inside
// model.num_classes, image-folder class lists (train = eval = num_classes), MLM shards verified
// and of the model's vocab_size, seq_len within max_positions. The model config lets synthetic
// data take the shapes the model needs. Errors name the file, the index and the fix.
DataSets make_datasets(const Config& data_cfg, const Config& model_cfg, uint64_t seed);

// ConfigError naming the key and its line if the train section asks for evaluation
// (eval_every, max_eval_batches) but `sets` has no evaluation set: nothing would be evaluated.
void check_eval_keys(const DataSets& sets, const Config& train_cfg);

}  // namespace ada::trainer
