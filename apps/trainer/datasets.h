// The `data` section of a run config -> the training and evaluation datasets.
// Names: mnist, fashion_mnist (IDX folders), image_folder (ImageNet-style JPEG folders),
// mlm (token shards from prepare_mlm), synthetic (any shapes; for throughput and smoke runs).
// A new data set is one class in data/ plus one branch here.
#pragma once

#include <memory>
#include <string>

#include "core/config.h"
#include "data/dataset.h"

namespace ada::trainer {

struct DataSets {
  std::shared_ptr<const data::Dataset> train;
  std::shared_ptr<const data::Dataset> eval;  // may be null: no evaluation
  std::string eval_metric;                    // "top1" or "mlm" (what the model reports)
};

// `model_name` lets synthetic data take the shapes the model needs.
DataSets make_datasets(const Config& data_cfg, const Config& model_cfg, uint64_t seed);

}  // namespace ada::trainer
