#include "data/held_out.h"

#include "base/error.h"

namespace ada::data {

SubsetDataset::SubsetDataset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices,
                             std::string what)
    : base_(std::move(base)), indices_(std::move(indices)), what_(std::move(what)) {
  ADA_CHECK_ARG(base_ != nullptr, ConfigError) << "SubsetDataset: no base set";
  const int64_t n = base_->size();
  for (int64_t i : indices_)
    ADA_CHECK_ARG(i >= 0 && i < n, ConfigError)
        << "SubsetDataset: index " << i << " outside [0, " << n << ") of " << base_->describe();
}

std::shared_ptr<SubsetDataset> SubsetDataset::range(std::shared_ptr<const Dataset> base,
                                                    int64_t begin, int64_t end, std::string what) {
  ADA_CHECK_ARG(base != nullptr && 0 <= begin && begin <= end && end <= base->size(), ConfigError)
      << "SubsetDataset: range [" << begin << ", " << end << ") outside the base set";
  std::vector<int64_t> idx(static_cast<size_t>(end - begin));
  for (int64_t i = begin; i < end; ++i) idx[static_cast<size_t>(i - begin)] = i;
  return std::make_shared<SubsetDataset>(std::move(base), std::move(idx), std::move(what));
}

Example SubsetDataset::get(int64_t index, int64_t epoch) const {
  ADA_CHECK_ARG(index >= 0 && index < size(), ConfigError)
      << describe() << ": index " << index << " outside [0, " << size() << ")";
  return base_->get(indices_[static_cast<size_t>(index)], epoch);
}

std::string SubsetDataset::describe() const {
  std::string s = what_ + ": " + std::to_string(size()) + " examples";
  if (!indices_.empty() && indices_.back() - indices_.front() + 1 == size())
    s += " (" + std::to_string(indices_.front()) + "-" + std::to_string(indices_.back()) + ")";
  return s + " of " + base_->describe();
}

int64_t read_validation_size(const Config& section, int64_t train_size,
                             const std::string& train_description) {
  if (!section.has("validation_size")) return 0;
  return section.get_in<int64_t>(
      "validation_size", Range::half_open(0, static_cast<double>(train_size)),
      "examples held out of the training set (" + train_description +
          ") for validation; at least one must stay for training (a tenth of them is " +
          std::to_string(train_size / 10) + ")");
}

void hold_out_tail(DataSets& sets, int64_t n, int64_t train_end,
                   std::shared_ptr<const Dataset> validation_source) {
  if (n <= 0) return;
  const std::shared_ptr<const Dataset> train = sets.train;
  const int64_t size = train->size();
  if (train_end < 0) train_end = size - n;
  ADA_CHECK(n < size && 0 <= train_end && train_end <= size - n)
      << "hold_out_tail: " << n << " of " << size << " examples, training up to " << train_end;
  if (!validation_source) validation_source = train;
  ADA_CHECK(validation_source->size() == size)
      << "hold_out_tail: the validation source has " << validation_source->size()
      << " examples, the training set " << size;
  sets.validation = SubsetDataset::range(validation_source, size - n, size, "validation");
  sets.train = SubsetDataset::range(train, 0, train_end, "training");
}

void hold_out_spread(DataSets& sets, int64_t n, std::shared_ptr<const Dataset> validation_source) {
  if (n <= 0) return;
  const std::shared_ptr<const Dataset> train = sets.train;
  const int64_t size = train->size();
  ADA_CHECK(n < size) << "hold_out_spread: " << n << " of " << size << " examples";
  if (!validation_source) validation_source = train;
  ADA_CHECK(validation_source->size() == size)
      << "hold_out_spread: the validation source has " << validation_source->size()
      << " examples, the training set " << size;
  std::vector<int64_t> val, keep;
  val.reserve(static_cast<size_t>(n));
  keep.reserve(static_cast<size_t>(size - n));
  for (int64_t i = 0; i < size; ++i) {
    // floor((i + 1) n / size) > floor(i n / size); (i + 1) n < size^2 fits 64 bits for any set.
    const bool held = ((i + 1) * n) / size > (i * n) / size;
    (held ? val : keep).push_back(i);
  }
  sets.validation = std::make_shared<SubsetDataset>(validation_source, std::move(val),
                                                    "validation (spread evenly)");
  sets.train = std::make_shared<SubsetDataset>(train, std::move(keep), "training");
}

}  // namespace ada::data
