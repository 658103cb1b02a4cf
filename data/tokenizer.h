// Tokenizer: BERT's WordPiece tokenizer, equal to HuggingFace's BertTokenizer for
// bert-base-uncased (do_lower_case=True): special tokens kept whole, then basic tokenisation
// (clean, CJK spacing, whitespace split, per-code-point lower-casing, NFD accent stripping,
// punctuation split), then greedy longest-match-first word pieces with "##" continuations.
// Owns the vocabulary (vocab.txt: one token per line, id = line number).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/config.h"
#include "base/hash.h"

namespace ada::data {

struct TokenizerOptions {
  bool lower_case = true;    // bert-*-uncased; strips accents too (as BertTokenizer does)
  bool tokenize_cjk = true;  // spaces around CJK ideographs
  // Keep the text "[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]" (exact case) as one special
  // token, as BertTokenizer does (its split_special_tokens=False). False: plain text.
  bool keep_special_tokens = true;
  int max_chars_per_word = 100;  // longer words become [UNK]
};

// Ids of the special tokens; -1 where the vocabulary lacks one.
struct SpecialIds {
  int32_t pad = -1, unk = -1, cls = -1, sep = -1, mask = -1;
};

class Tokenizer {
 public:
  // Reads vocab.txt. IoError naming the file if it is missing, unreadable or malformed (empty,
  // not UTF-8, an empty or duplicate token naming its line; any of [PAD], [UNK], [CLS], [SEP],
  // [MASK] missing, naming them), saying how to fetch the real one.
  static Tokenizer from_file(const std::string& vocab_path, TokenizerOptions options = {});
  // From tokens in id order; `source` names them in messages. Same checks, as IoError.
  Tokenizer(std::vector<std::string> tokens, std::string source, TokenizerOptions options = {});

  // Token ids of `text` (UTF-8; invalid bytes are dropped like U+FFFD), without [CLS]/[SEP].
  std::vector<int32_t> encode(std::string_view text) const;
  // The word pieces of `text` ("un", "##aff", "##able", "[UNK]", ...).
  std::vector<std::string> tokenize(std::string_view text) const;
  // The words after basic tokenisation, before word pieces (special tokens included as is).
  std::vector<std::string> basic_tokenize(std::string_view text) const;
  // Word pieces of one basic-tokenised word, appended to `ids`.
  void wordpiece(std::u32string_view word, std::vector<int32_t>& ids) const;
  // Pieces joined with spaces and "##" continuations glued on (BertTokenizer.decode without
  // clean-up). InternalError on an id outside the vocabulary.
  std::string decode(const std::vector<int32_t>& ids) const;

  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t token_to_id(std::string_view token) const;  // -1 if absent
  const std::string& id_to_token(int32_t id) const;   // InternalError if out of range
  const SpecialIds& special_ids() const { return special_; }
  // FNV-1a 64 of the tokens, each followed by '\n' (= of a canonical vocab.txt's bytes).
  uint64_t vocab_hash() const { return hash_; }
  const std::string& source() const { return source_; }
  const TokenizerOptions& options() const { return opt_; }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // Calls fn(segment, is_special) for the special tokens and the text between them, in order.
  template <class Fn>
  void split_special(std::string_view text, Fn&& fn) const;
  // Basic tokenisation of text without special tokens: calls fn(word) per word.
  template <class Fn>
  void basic_words(std::string_view text, Fn&& fn) const;

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> ids_;
  std::string source_;
  TokenizerOptions opt_;
  SpecialIds special_;
  uint64_t hash_ = 0;
  size_t max_token_chars_ = 0;  // longest token in code points, "##" excluded
};

// The tokenizer of the fine-tuning data sets (text_classification, squad) and squad_predict:
// data.vocab (default data/bert/vocab.txt), "[SEP]" and the like in a text read as text (as
// Google's tokenizer does), its size checked against model.vocab_size (ConfigError naming both).
Tokenizer fine_tuning_tokenizer(const Config& data, const Config& model);

}  // namespace ada::data
