// Sentence classification from JSON Lines (data.name: text_classification): one object a line,
// {"text": "...", "label": "<one of data.labels>"} (other fields ignored), tokenised once at open
// with BERT's WordPiece vocabulary into [CLS] text [SEP], cut to data.seq_len, padded with [PAD].
// Fields of an example: input_ids, segment_ids (zeros), attention_mask [seq_len] i64, label (i64,
// the label's index in data.labels). No randomness: get() ignores the epoch.
// tools/fetch_data.sh spam makes data/spam/{train,dev,test}.jsonl in this format.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/registry.h"
#include "data/tokenizer.h"

namespace ada::data {

struct TextClassificationOptions {
  int64_t seq_len = 128;            // [CLS] + at most seq_len - 2 word pieces + [SEP]
  std::vector<std::string> labels;  // class names; a label's index is its class
};

class TextClassificationDataset : public Dataset {
 public:
  // Reads and tokenises `path`. IoError naming the file and line for a line that is not a JSON
  // object with a string "text" and a string "label" from options.labels (the known ones listed),
  // or for an empty file. Only the first 32 x seq_len bytes of a text are tokenised.
  static std::shared_ptr<const TextClassificationDataset> open(const std::string& path,
                                                               const Tokenizer& tokenizer,
                                                               const TextClassificationOptions& o);

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Example get(int64_t index, int64_t epoch) const override;
  std::string describe() const override;
  // Examples per class, in options.labels order.
  std::vector<int64_t> class_counts() const;

 private:
  TextClassificationDataset() = default;
  std::string path_;
  TextClassificationOptions opt_;
  int32_t pad_ = 0;
  std::vector<std::vector<int32_t>> ids_;  // with [CLS] and [SEP], unpadded
  std::vector<int64_t> labels_;
};

// The `data` section: path (training file), eval_path (optional), labels (list, required,
// matching model.num_classes), seq_len (<= model.max_positions), vocab (default
// data/bert/vocab.txt; its size must equal model.vocab_size).
DataSets read_text_classification(const DatasetRequest& request);

}  // namespace ada::data
