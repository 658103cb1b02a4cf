// Validation splits: a part of the training set held out (data.validation_size), never trained
// on, evaluated as its own "validation" figures (val_* beside the test set's eval_*), so that
// choices (an LR, a factor, a threshold) are made on it and the test set only reports the chosen
// points. The split is a pure function of the data and the key: the same on every rank, for
// every seed and every run.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/config.h"
#include "data/dataset.h"
#include "data/registry.h"

namespace ada::data {

// Examples `indices` of another set, in that order: example i is base example indices[i] (its
// augmentation and masking are drawn for the base index, so a view changes no example).
class SubsetDataset : public Dataset {
 public:
  // ConfigError if an index lies outside the base set.
  SubsetDataset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices,
                std::string what);
  // Examples [begin, end) of `base`.
  static std::shared_ptr<SubsetDataset> range(std::shared_ptr<const Dataset> base, int64_t begin,
                                              int64_t end, std::string what);

  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Example get(int64_t index, int64_t epoch) const override;
  // e.g. "validation: examples 55000-59999 of IDX images '...' (60000 examples)"
  std::string describe() const override;

  int64_t base_index(int64_t index) const { return indices_[static_cast<size_t>(index)]; }
  const Dataset& base() const { return *base_; }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
  std::string what_;
};

// data.validation_size: how many examples of `train` (of `train_size`) to hold out; 0 when the
// key is not set. ConfigError naming the key as written unless 0 <= n < train_size.
int64_t read_validation_size(const Config& section, int64_t train_size,
                             const std::string& train_description);

// The last `n` examples of `train` become the validation set (read through `validation_source`,
// the same examples with evaluation transforms where the set augments; `train` itself when
// null); training keeps examples [0, train_end) (default: all before the held-out ones; a set
// whose examples share a document passes where that document's first example starts). n == 0
// leaves `sets` as it is.
void hold_out_tail(DataSets& sets, int64_t n, int64_t train_end = -1,
                   std::shared_ptr<const Dataset> validation_source = nullptr);

// Every example i with floor((i + 1) n / size) > floor(i n / size) (n of them, spread evenly
// over the set, so over every class of a set sorted by class) becomes the validation set, read
// through `validation_source` (as above); training keeps the others. n == 0: nothing changes.
void hold_out_spread(DataSets& sets, int64_t n,
                     std::shared_ptr<const Dataset> validation_source = nullptr);

}  // namespace ada::data
