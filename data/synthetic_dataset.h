// SyntheticDataset: deterministic random examples of any shape, for throughput runs and tests.
// Each field is filled from Philox counters keyed by (seed, field, index): the same example on
// every call, every machine and every worker count; it does not change with the epoch.
#pragma once

#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/registry.h"

namespace ada::data {

struct SyntheticField {
  std::string name;
  Shape shape;               // per example; {} is a scalar
  DType dtype = DType::f32;  // f32: normal(mean, stddev); i32/i64: uniform integers in [low, high)
  double mean = 0.0, stddev = 1.0;
  int64_t low = 0, high = 2;
  // Integers only: each element keeps its draw with probability keep_prob, else is drop_value
  // (e.g. MLM labels: keep_prob 0.15, drop_value -100, cross-entropy's ignore index).
  double keep_prob = 1.0;
  int64_t drop_value = -100;
};

class SyntheticDataset : public Dataset {
 public:
  // ConfigError on size < 0, no fields, duplicate names, an empty integer range or a dtype other
  // than f32/i32/i64.
  SyntheticDataset(int64_t size, std::vector<SyntheticField> fields, uint64_t seed = 0);

  // "image" f32 [channels, height, width] ~ N(0,1) and "label" i64 scalar in [0, num_classes).
  static std::shared_ptr<SyntheticDataset> images(int64_t size, int64_t channels, int64_t height,
                                                  int64_t width, int64_t num_classes,
                                                  uint64_t seed = 0);
  // BERT-shaped, field names as MlmDataset's: "input_ids" i64 [seq_len] in [0, vocab_size),
  // "segment_ids" i64 [seq_len] in {0, 1}, "attention_mask" i64 [seq_len] all 1, "labels" i64
  // [seq_len]: an id in [0, vocab_size) at ~15% of the positions, -100 elsewhere.
  static std::shared_ptr<SyntheticDataset> tokens(int64_t size, int64_t seq_len, int64_t vocab_size,
                                                  uint64_t seed = 0);

  int64_t size() const override { return size_; }
  Example get(int64_t index, int64_t epoch) const override;
  std::string describe() const override;

 private:
  int64_t size_;
  std::vector<SyntheticField> fields_;
  uint64_t seed_;
};

// data.name synthetic: random examples of the shapes the model needs (data.size, data.eval_size,
// data.image_shape for classifiers, data.seq_len for a model without classes: MLM sequences).
// Stands in for any data set in smoke and throughput runs: the keys of the set it replaces are
// accepted and ignored.
DataSets read_synthetic(const DatasetRequest& request);

}  // namespace ada::data
