// SQuAD v1.1 for fine-tuning BERT's question-answering head (data.name: squad): the official JSON
// files (data/squad.h) made into windows as run_squad.py makes them (data/squad_features.h), one
// example per window: input_ids, segment_ids, attention_mask [max_seq_length] i64 and
// start_position, end_position (i64 scalars: the answer's first and last position in the window,
// 0 and 0 — [CLS] — when it is not wholly inside). The evaluation set (data.eval_path, e.g.
// dev-v1.1.json with up to 3 answers a question) is labelled with each question's first answer,
// so a run reports a dev loss and start/end accuracies; EM and F1 come from build/bin/squad_predict
// (every window's logits decoded into answers, scored as evaluate-v1.1.py). SQuAD itself is in no
// package here: users point data.path at train-v1.1.json and data.eval_path at dev-v1.1.json.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/registry.h"
#include "data/squad.h"
#include "data/squad_features.h"
#include "data/tokenizer.h"

namespace ada::data {

// The windows of one SQuAD file as a Dataset.
class SquadWindows : public Dataset {
 public:
  // Reads `path` and makes its features; labelled by every question's first answer.
  static std::shared_ptr<const SquadWindows> open(const std::string& path,
                                                  const Tokenizer& tokenizer,
                                                  const SquadFeatureOptions& options);
  int64_t size() const override { return static_cast<int64_t>(features_.size()); }
  Example get(int64_t index, int64_t epoch) const override;
  std::string describe() const override;

 private:
  SquadWindows() = default;
  std::string path_;
  int64_t questions_ = 0;
  std::vector<SquadFeature> features_;
};

// `dataset` with every question's answers cut to the first (dev files have up to three).
SquadDataset first_answers_only(SquadDataset dataset);

// data.max_seq_length (<= model.max_positions), doc_stride, max_query_length.
SquadFeatureOptions squad_feature_options(const Config& data, const Config& model);

// The `data` section: path (training file), eval_path (optional), vocab, max_seq_length (384),
// doc_stride (128), max_query_length (64). The model must have head: question_answering.
DataSets read_squad_windows(const DatasetRequest& request);

}  // namespace ada::data
