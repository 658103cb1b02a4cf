#include "data/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "data/unicode.h"

namespace ada::data {

namespace {

constexpr const char* kFetchHint =
    "; fetch the bert-base-uncased vocabulary with `tools/fetch_data.sh bert-vocab` "
    "(writes data/bert/vocab.txt) or pass a vocab.txt with one token per line";

constexpr const char* kSpecialNames[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};

}  // namespace

Tokenizer Tokenizer::from_file(const std::string& vocab_path, TokenizerOptions options) {
  std::error_code ec;
  ADA_CHECK_ARG(!std::filesystem::is_directory(vocab_path, ec), IoError)
      << "vocabulary " << vocab_path << " is a folder, not a vocab.txt" << kFetchHint;
  std::ifstream in(vocab_path, std::ios::binary);
  ADA_CHECK_ARG(in.good(), IoError) << "vocabulary " << vocab_path << ": cannot open" << kFetchHint;
  std::ostringstream ss;
  ss << in.rdbuf();
  ADA_CHECK_ARG(!in.bad(), IoError) << "vocabulary " << vocab_path << ": read failed" << kFetchHint;
  const std::string content = ss.str();
  std::vector<std::string> tokens;
  size_t pos = 0;
  while (pos < content.size()) {
    size_t nl = content.find('\n', pos);
    if (nl == std::string::npos) nl = content.size();
    std::string line = content.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.pop_back();  // tolerate CRLF files
    tokens.push_back(std::move(line));
    pos = nl + 1;
  }
  return Tokenizer(std::move(tokens), vocab_path, options);
}

Tokenizer::Tokenizer(std::vector<std::string> tokens, std::string source, TokenizerOptions options)
    : tokens_(std::move(tokens)), source_(std::move(source)), opt_(options) {
  ADA_CHECK_ARG(!tokens_.empty(), IoError) << "vocabulary " << source_ << " is empty" << kFetchHint;
  ADA_CHECK_ARG(tokens_.size() < (1u << 31), IoError)
      << "vocabulary " << source_ << " has " << tokens_.size() << " tokens; at most 2^31 - 1";
  ADA_CHECK_ARG(opt_.max_chars_per_word > 0, IoError)
      << "tokenizer for " << source_ << ": max_chars_per_word must be positive";
  ids_.reserve(tokens_.size() * 2);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const std::string& t = tokens_[i];
    const size_t line = i + 1;
    ADA_CHECK_ARG(!t.empty(), IoError) << "vocabulary " << source_ << " line " << line
                                       << ": empty token; the file is malformed" << kFetchHint;
    ADA_CHECK_ARG(unicode::valid_utf8(t), IoError)
        << "vocabulary " << source_ << " line " << line << ": not valid UTF-8" << kFetchHint;
    auto [it, fresh] = ids_.emplace(t, static_cast<int32_t>(i));
    ADA_CHECK_ARG(fresh, IoError) << "vocabulary " << source_ << " line " << line << ": token '"
                                  << t << "' repeats line " << it->second + 1
                                  << "; the file is malformed" << kFetchHint;
    max_token_chars_ = std::max(max_token_chars_, unicode::decode_utf8(t).size());
    h = fnv1a64(t.data(), t.size(), h);
    h = fnv1a64("\n", 1, h);
  }
  hash_ = h;
  special_.pad = token_to_id("[PAD]");
  special_.unk = token_to_id("[UNK]");
  special_.cls = token_to_id("[CLS]");
  special_.sep = token_to_id("[SEP]");
  special_.mask = token_to_id("[MASK]");
  // BERT needs all five: [UNK] for unknown words, the others to build and mask sequences.
  std::string missing;
  for (const char* name : kSpecialNames)
    if (token_to_id(name) < 0) missing += std::string(missing.empty() ? "" : ", ") + name;
  ADA_CHECK_ARG(missing.empty(), IoError)
      << "vocabulary " << source_ << " (" << tokens_.size() << " tokens) has no " << missing
      << " token; a BERT vocab.txt holds [PAD], [UNK], [CLS], [SEP] and [MASK], one per line"
      << kFetchHint;
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  ADA_CHECK(id >= 0 && id < vocab_size()) << "token id " << id << " outside the vocabulary of "
                                          << vocab_size() << " (" << source_ << ")";
  return tokens_[static_cast<size_t>(id)];
}

template <class Fn>
void Tokenizer::split_special(std::string_view text, Fn&& fn) const {
  if (!opt_.keep_special_tokens) {
    fn(text, false);
    return;
  }
  size_t start = 0, i = 0;
  while ((i = text.find('[', i)) != std::string_view::npos) {
    bool matched = false;
    for (const char* name : kSpecialNames) {
      const std::string_view s(name);
      if (text.substr(i, s.size()) == s && ids_.count(s)) {
        if (i > start) fn(text.substr(start, i - start), false);
        fn(s, true);
        i += s.size();
        start = i;
        matched = true;
        break;
      }
    }
    if (!matched) ++i;
  }
  if (start < text.size()) fn(text.substr(start), false);
}

template <class Fn>
void Tokenizer::basic_words(std::string_view text, Fn&& fn) const {
  using namespace unicode;
  // 1. Clean (drop NUL, U+FFFD and controls; whitespace -> ' ') and space out CJK ideographs.
  const std::u32string cps = decode_utf8(text);
  std::u32string clean;
  clean.reserve(cps.size() + 8);
  for (char32_t c : cps) {
    const uint8_t p = props(c);
    if (c == 0 || c == 0xFFFD || (p & kControl)) continue;
    if (p & kWhitespace) {
      clean.push_back(U' ');
    } else if (opt_.tokenize_cjk && (p & kCjk)) {
      clean.push_back(U' ');
      clean.push_back(c);
      clean.push_back(U' ');
    } else {
      clean.push_back(c);
    }
  }
  // 2. Split on whitespace (str.split()); per word: lower-case, NFD, drop Mn; split punctuation.
  std::u32string word, norm;
  size_t i = 0;
  while (i < clean.size()) {
    while (i < clean.size() && (props(clean[i]) & kSpace)) ++i;
    size_t j = i;
    while (j < clean.size() && !(props(clean[j]) & kSpace)) ++j;
    if (j == i) break;
    std::u32string_view raw(clean.data() + i, j - i);
    i = j;
    if (opt_.lower_case) {
      word.clear();
      bool ascii = true;
      for (char32_t c : raw) {
        append_lower(c, word);
        ascii = ascii && c < 128;
      }
      if (!ascii) {
        norm.clear();
        for (char32_t c : word) append_decomposition(c, norm);
        canonical_order(norm);
        word.clear();
        for (char32_t c : norm)
          if (!(props(c) & kMn)) word.push_back(c);
      }
    } else {
      word.assign(raw);
    }
    size_t start = 0;
    for (size_t k = 0; k < word.size(); ++k) {
      if (props(word[k]) & kPunct) {
        if (k > start) fn(std::u32string_view(word.data() + start, k - start));
        fn(std::u32string_view(word.data() + k, 1));
        start = k + 1;
      }
    }
    if (start < word.size()) fn(std::u32string_view(word.data() + start, word.size() - start));
  }
}

void Tokenizer::wordpiece(std::u32string_view word, std::vector<int32_t>& ids) const {
  if (word.size() > static_cast<size_t>(opt_.max_chars_per_word)) {
    ids.push_back(special_.unk);
    return;
  }
  // UTF-8 of the word with the byte offset of every code point boundary.
  std::string utf8;
  std::vector<size_t> at(word.size() + 1);
  for (size_t k = 0; k < word.size(); ++k) {
    at[k] = utf8.size();
    unicode::append_utf8(word[k], utf8);
  }
  at[word.size()] = utf8.size();
  const size_t mark = ids.size();
  std::string key;
  size_t start = 0;
  while (start < word.size()) {
    size_t end = std::min(word.size(), start + max_token_chars_);
    int32_t found = -1;
    for (; end > start; --end) {
      key.assign(start > 0 ? "##" : "");
      key.append(utf8, at[start], at[end] - at[start]);
      auto it = ids_.find(key);
      if (it != ids_.end()) {
        found = it->second;
        break;
      }
    }
    if (found < 0) {  // some piece matches nothing: the whole word is unknown
      ids.resize(mark);
      ids.push_back(special_.unk);
      return;
    }
    ids.push_back(found);
    start = end;
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  split_special(text, [&](std::string_view seg, bool special) {
    if (special) {
      ids.push_back(token_to_id(seg));
    } else {
      basic_words(seg, [&](std::u32string_view w) { wordpiece(w, ids); });
    }
  });
  return ids;
}

std::vector<std::string> Tokenizer::tokenize(std::string_view text) const {
  std::vector<std::string> out;
  for (int32_t id : encode(text)) out.push_back(tokens_[static_cast<size_t>(id)]);
  return out;
}

std::vector<std::string> Tokenizer::basic_tokenize(std::string_view text) const {
  std::vector<std::string> out;
  split_special(text, [&](std::string_view seg, bool special) {
    if (special) {
      out.emplace_back(seg);
    } else {
      basic_words(seg, [&](std::u32string_view w) { out.push_back(unicode::encode_utf8(w)); });
    }
  });
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  // BertTokenizer.convert_tokens_to_string: " ".join(tokens).replace(" ##", "").
  std::string joined;
  for (int32_t id : ids) {
    if (!joined.empty()) joined.push_back(' ');
    joined += id_to_token(id);
  }
  std::string out;
  out.reserve(joined.size());
  for (size_t i = 0; i < joined.size();) {
    if (joined.compare(i, 3, " ##") == 0) {
      i += 3;
    } else {
      out.push_back(joined[i++]);
    }
  }
  return out;
}

Tokenizer fine_tuning_tokenizer(const Config& data, const Config& model) {
  const std::string vocab = data.get_path_or("vocab", "data/bert/vocab.txt");
  TokenizerOptions options;
  options.keep_special_tokens = false;
  Tokenizer tokenizer = Tokenizer::from_file(vocab, options);
  const int64_t vocab_size = model.get_or<int64_t>("vocab_size", 30522);
  ADA_CHECK_ARG(tokenizer.vocab_size() == vocab_size, ConfigError)
      << data.where("vocab") << ": '" << vocab << "' has " << tokenizer.vocab_size()
      << " tokens, but model.vocab_size is " << vocab_size << "; make them equal";
  return tokenizer;
}

}  // namespace ada::data
