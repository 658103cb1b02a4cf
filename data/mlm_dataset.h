// MlmDataset: BERT masked-LM pre-training examples over a tokenised corpus (data/mlm_shards.h):
// fixed-length sequences, packed "[CLS] A [SEP]" or NSP pairs "[CLS] A [SEP] B [SEP]", with 15%
// of the content tokens chosen for prediction (80% [MASK], 10% random id, 10% kept) afresh each
// epoch, as a pure function of (seed, epoch, index).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/mlm_shards.h"
#include "data/registry.h"

namespace ada::data {

struct MlmOptions {
  int64_t seq_len = 128;           // tokens per example, [CLS]/[SEP]/padding included
  bool nsp = false;                // sentence pairs with "nsp_label"; false: packed single segments
  double mask_prob = 0.15;         // share of the content tokens chosen for prediction
  double mask_token_prob = 0.8;    // of the chosen: replaced by [MASK]
  double random_token_prob = 0.1;  // of the chosen: replaced by a uniform id in [0, vocab)
  int64_t max_predictions = 0;     // cap on chosen tokens per example; 0 = no cap
  uint64_t seed = 0;               // masking/pairing stream; see example_generator()
  int64_t vocab_size = 0;          // the model's vocabulary; the shards' must equal it (0: any)
};

// Fields of an example (names as nn/model.h reads them), all i64:
//   input_ids [L]; segment_ids [L]: 0 for [CLS] A [SEP], 1 for B [SEP], 0 on padding;
//   attention_mask [L]: 1 on tokens, 0 on padding; labels [L]: the original id where a token was
//   chosen, -100 (cross-entropy's ignore_index) elsewhere; with NSP, nsp_label []: 0 when B
//   follows A in its document, 1 when B is a random segment of another document (p = 1/2);
//   mlm_positions [P] and mlm_labels [P]: the chosen positions in ascending order and their
//   labels, then position 0 with label -100 up to P = predictions_per_example() (every
//   example's count is at most P, so every batch has one shape: CUDA graphs replay it;
//   Model::prepare_batch makes them flat positions of the batch).
// Chosen: round(mask_prob * n) of the n content positions (at least 1; at most max_predictions
// when set), never [CLS], [SEP] or padding. A random replacement is uniform over the whole
// vocabulary, as in BERT. Pairs (where A is split from B, whether B is random) also change with
// the epoch. NSP truncates the longer of A and B from its end to fit; a random B starts at a
// uniformly chosen segment outside A's document (outside A's chunk in a one-document corpus).
class MlmDataset : public Dataset {
 public:
  // ConfigError on bad options (seq_len < 8, probabilities outside [0, 1] or summing past 1);
  // IoError naming the shards if the corpus is empty, its vocabulary lacks [CLS], [SEP],
  // [MASK] or [PAD], or its vocabulary size differs from options.vocab_size (when set).
  MlmDataset(std::shared_ptr<const MlmCorpus> corpus, MlmOptions options);
  // Opens shard files/folders (MlmCorpus::open, `verify`'s shards verified: by default every
  // one) and builds the dataset.
  static std::shared_ptr<MlmDataset> open(const std::vector<std::string>& shard_paths,
                                          MlmOptions options, ShardVerification verify = {});

  // Packed: ceil((T + D - 1) / (seq_len - 2)) for T tokens in D documents (one [SEP] between
  // consecutive documents). NSP: the number of chunks, i.e. runs of whole consecutive segments
  // of one document holding at most seq_len - 3 tokens (a longer segment is a chunk alone).
  int64_t size() const override;
  Example get(int64_t index, int64_t epoch) const override;
  // The most tokens any example has chosen: round(mask_prob * n) for the most content tokens
  // n a sequence can hold (seq_len - 2 packed, seq_len - 3 with NSP), at least 1, at most
  // max_predictions when set (0 when mask_prob is 0).
  int64_t predictions_per_example() const;
  std::string describe() const override;

  // The sequence of example `index` before masking (masking never changes its layout).
  struct Sequence {
    std::vector<int32_t> ids;          // seq_len ids, [PAD]-padded
    std::vector<int32_t> segment_ids;  // seq_len
    std::vector<uint8_t> content;  // 1 where a corpus token is (maskable), 0 on [CLS]/[SEP]/[PAD]
    int64_t length = 0;            // tokens before the padding
    int32_t nsp_label = -1;        // 0 is-next, 1 random; -1 without NSP
  };
  Sequence sequence(int64_t index, int64_t epoch) const;

  // The first example holding a token of the document in which example `index` begins (a packed
  // sequence may start inside a document): a validation split at `index` trains on the
  // examples before it, so that no document is in both.
  int64_t first_example_of_document_at(int64_t index) const;

  const MlmOptions& options() const { return opt_; }
  const MlmCorpus& corpus() const { return *corpus_; }

 private:
  struct DocSpan {  // a document's tokens: contiguous in one shard
    uint32_t shard;
    uint64_t token_begin;  // in the shard
    uint64_t tokens;
  };
  struct Chunk {  // NSP: global segments [first, end) of one document
    uint64_t first, end;
    uint64_t doc;
  };
  // The example's random numbers: counters first, first + 1, ... of example_generator().
  struct Stream {
    uint64_t key = 0, first = 0, next = 0;
    uint64_t u64();
    double unit();               // [0, 1)
    uint64_t below(uint64_t n);  // [0, n), n > 0
  };
  Sequence build(int64_t index, Stream& rng) const;
  // How many of n content tokens an example chooses.
  int64_t chosen_count(int64_t n) const;
  void fill_packed(int64_t index, Sequence& seq) const;
  void fill_nsp(int64_t index, Stream& rng, Sequence& seq) const;
  // Appends up to `max` tokens of global segment s, starting at token `from`.
  void append_segment(uint64_t s, uint64_t from, uint64_t max, std::vector<int32_t>& out) const;

  std::shared_ptr<const MlmCorpus> corpus_;
  MlmOptions opt_;
  SpecialIds special_;
  int32_t vocab_size_ = 0;
  // Packed mode.
  std::vector<DocSpan> docs_;
  std::vector<uint64_t> doc_stream_start_;  // D + 1 entries
  // NSP mode.
  std::vector<Chunk> chunks_;
};

// data.name mlm: data.path and data.eval_path (a shard or a list, from prepare_mlm),
// data.seq_len (128, at most model.max_positions), data.max_predictions (0: no cap),
// data.validation_size (the last N sequences of data.path held out, whole documents: the
// sequences that share a document with them are in neither set; not with model.nsp, whose
// random next sentences come from any document).
DataSets read_mlm(const DatasetRequest& request);

}  // namespace ada::data
