// SQuAD v1.1 features and predictions as Google's run_squad.py (BERT) makes them: the context split
// at whitespace into words with a character -> word map; per word the WordPiece sub-tokens; the
// answer's words from answer_start and its length, narrowed to the sub-tokens that spell the
// tokenised answer (_improve_answer_span); windows `[CLS] question [SEP] doc-span [SEP]` over the
// sub-tokens every doc_stride tokens, each token marked in the window where it has the most context
// (_check_is_max_context); training labels inside the window, or 0/0 ([CLS]) when the answer is
// not wholly in it. Decoding takes per window the n_best_size highest start and end logits, keeps
// the pairs start <= end, at most max_answer_length tokens, both on document tokens and the start
// in its max-context window, and maps the best (start + end logit) back to the original text as
// get_final_text does. Character offsets and lengths count code points, as Python's do.
//
// Where the result differs from run_squad.py, on purpose or through the tokenizer:
//  - Bad training examples: run_squad.py skips an example whose answer text is not found at its
//    answer_start (a warning); so do we, logging a warning that names the question id. We also
//    skip, with the same warning, the inputs on which run_squad.py raises IndexError or indexes
//    from the end of a Python list: an empty answer text, an answer running past the context's
//    end, an answer_start inside the context's leading whitespace.
//  - The tokenizer is ours (data/tokenizer.h, HuggingFace's BertTokenizer): with its defaults it
//    keeps "[CLS]", "[SEP]", ... in the text whole (Google's splits them: "[", "sep", "]"; set
//    keep_special_tokens = false for Google's), lower-cases code point by code point (Google's
//    str.lower() writes a word-final capital sigma as ς, ours as σ) and makes a word longer than
//    100 code points [UNK] (Google's: 200; max_chars_per_word). get_final_text's basic
//    tokenisation is the same tokenizer's.
//  - Padding uses the vocabulary's [PAD] id (0 in BERT's vocab.txt, which run_squad.py assumes).
//  - A NaN logit ranks below every number.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "data/squad.h"
#include "data/tokenizer.h"

namespace ada::data {

struct SquadFeatureOptions {
  int max_seq_length = 384;   // tokens per window, [CLS] and both [SEP] included; padded to it
  int doc_stride = 128;       // the next window starts this many sub-tokens further (at most)
  int max_query_length = 64;  // the question's sub-tokens are cut to this many
};

// One window of one question. Positions are indexes into input_ids.
struct SquadFeature {
  int64_t example = 0;  // the question's index in the dataset (articles, paragraphs, qas order)
  int32_t span = 0;     // the window's index among its question's windows
  // max_seq_length each: [CLS] question [SEP] document [SEP], then [PAD]s; 0 for the question
  // part, 1 for the document and its [SEP], 0 for padding; 1 on real tokens, 0 on padding.
  std::vector<int32_t> input_ids, segment_ids, attention_mask;
  // Training labels: the answer's first and last position in this window, or 0 and 0 ([CLS])
  // when the answer is not wholly inside it. -1 and -1 for features made with training = false.
  int64_t start_position = -1, end_position = -1;
  // The document tokens sit at positions doc_offset .. doc_offset + token_to_orig.size() - 1
  // (doc_offset = question tokens + 2); doc_start is the first one's index among the context's
  // sub-tokens. run_squad.py's token_to_orig_map and token_is_max_context, as arrays over those
  // positions: the context word (squad_doc_tokens' index) of each, and whether this window is
  // the one where it has the most context.
  int32_t doc_offset = 0, doc_start = 0;
  std::vector<int32_t> token_to_orig;
  std::vector<uint8_t> max_context;

  // The context word of `position`, or -1 outside the document tokens.
  int32_t orig_word(int64_t position) const;
  // token_is_max_context.get(position, False).
  bool is_max_context(int64_t position) const;
};

// run_squad.py's whitespace split of a context: words between runs of ' ', \t, \r, \n and U+202F
// (other Unicode spaces stay inside words), and for every code point the index of its word (of
// the previous word for whitespace; -1 before the first word).
struct SquadDocTokens {
  std::vector<std::string> words;
  std::vector<int32_t> char_to_word;
};
SquadDocTokens squad_doc_tokens(std::string_view context);

// The features of every question of `dataset`, in question order, each question's windows in
// order. training = true adds the labels from each question's only answer (ConfigError naming
// the question unless it has exactly one: use training = false for dev files) and skips, with a
// warning, the questions whose answer does not match the context (see above). ConfigError when
// max_seq_length <= max_query_length + 3 (run_squad.py's check), max_query_length < 0 or
// doc_stride < 1.
std::vector<SquadFeature> make_squad_features(const SquadDataset& dataset,
                                              const Tokenizer& tokenizer,
                                              const SquadFeatureOptions& options, bool training);

struct SquadDecodeOptions {
  int n_best_size = 20;        // start and end candidates per window
  int max_answer_length = 30;  // in sub-tokens
};

// The predicted answer text of every question of `dataset` (question id -> text), from the
// logits of `features` (start_logits[i] and end_logits[i] belong to features[i], one per
// position), made by make_squad_features from this dataset and tokenizer. A question without a
// valid span gets "empty", as run_squad.py's nonce prediction.
// ShapeError when the logits do not match the features; IoError when a feature does not belong to
// the dataset (example or word index out of range).
std::map<std::string, std::string> squad_predictions(
    const SquadDataset& dataset, const Tokenizer& tokenizer,
    const std::vector<SquadFeature>& features, const std::vector<std::vector<float>>& start_logits,
    const std::vector<std::vector<float>>& end_logits, const SquadDecodeOptions& options = {});

// get_final_text: the part of `orig_text` (whitespace-joined context words) that spells
// `pred_text` (de-tokenised word pieces), aligned through the basic tokenisation of `orig_text`
// character by character, spaces left out; `orig_text` itself when the alignment fails.
// E.g. ("steve smith", "Steve Smith's") -> "Steve Smith".
std::string squad_final_text(std::string_view pred_text, std::string_view orig_text,
                             const Tokenizer& tokenizer);

// predictions.json in the official format: one JSON object, question id -> answer text, indented
// by 4 as run_squad.py writes it, but UTF-8 where it writes \uXXXX escapes and keys sorted where
// it keeps the dataset's order (the same JSON to every reader); written atomically (IoError
// naming the file).
void write_squad_predictions(const std::string& path,
                             const std::map<std::string, std::string>& predictions);

}  // namespace ada::data
