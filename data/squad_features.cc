#include "data/squad_features.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/log.h"
#include "data/unicode.h"

namespace ada::data {
namespace {

// run_squad.py's is_whitespace.
bool is_squad_whitespace(char32_t c) {
  return c == U' ' || c == U'\t' || c == U'\r' || c == U'\n' || c == 0x202F;
}

bool is_space(char32_t c) {
  return (unicode::props(c) & unicode::kSpace) != 0;
}

// str.split() on code points.
std::vector<std::u32string> split_spaces(std::u32string_view s) {
  std::vector<std::u32string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && is_space(s[i])) ++i;
    size_t j = i;
    while (j < s.size() && !is_space(s[j])) ++j;
    if (j > i) out.emplace_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

template <class S>
S join(const std::vector<S>& parts, size_t begin, size_t end, const S& sep) {
  S out;
  for (size_t i = begin; i < end; ++i) {
    if (i > begin) out += sep;
    out += parts[i];
  }
  return out;
}

template <class S>
S join(const std::vector<S>& parts, const S& sep) {
  return join(parts, 0, parts.size(), sep);
}

// Python's str.replace(from, to): left to right, non-overlapping.
std::u32string replace_all(std::u32string_view s, std::u32string_view from,
                           std::u32string_view to) {
  std::u32string out;
  size_t i = 0;
  while (i < s.size()) {
    if (s.substr(i, from.size()) == from) {
      out += to;
      i += from.size();
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

// A paragraph's words and their sub-tokens (run_squad.py's doc_tokens, all_doc_tokens,
// tok_to_orig_index, orig_to_tok_index); the same for every question of the paragraph.
struct DocPieces {
  SquadDocTokens doc;
  std::vector<int32_t> ids, tok_to_orig, orig_to_tok;
};

DocPieces doc_pieces(const std::string& context, const Tokenizer& tokenizer) {
  DocPieces p;
  p.doc = squad_doc_tokens(context);
  for (size_t w = 0; w < p.doc.words.size(); ++w) {
    p.orig_to_tok.push_back(static_cast<int32_t>(p.ids.size()));
    for (int32_t id : tokenizer.encode(p.doc.words[w])) {
      p.tok_to_orig.push_back(static_cast<int32_t>(w));
      p.ids.push_back(id);
    }
  }
  return p;
}

// _improve_answer_span: the first (start, longest end) sub-span of [start, end] whose tokens are
// the tokenised answer; [start, end] itself if none is.
std::pair<int64_t, int64_t> improve_answer_span(const std::vector<int32_t>& doc, int64_t start,
                                                int64_t end, const std::vector<int32_t>& answer) {
  const auto n = static_cast<int64_t>(answer.size());
  for (int64_t s = start; s <= end; ++s)
    for (int64_t e = end; e >= s; --e)
      if (e - s + 1 == n && std::equal(answer.begin(), answer.end(), doc.begin() + s))
        return {s, e};
  return {start, end};
}

struct DocSpan {
  int64_t start, length;
};

// _check_is_max_context: whether span `cur` is the first of the spans with the best score
// min(left context, right context) + 0.01 * span length at sub-token `position`.
bool check_is_max_context(const std::vector<DocSpan>& spans, size_t cur, int64_t position) {
  std::optional<double> best;
  size_t best_index = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    const int64_t end = spans[i].start + spans[i].length - 1;
    if (position < spans[i].start || position > end) continue;
    const int64_t left = position - spans[i].start, right = end - position;
    const double score =
        static_cast<double>(std::min(left, right)) + 0.01 * static_cast<double>(spans[i].length);
    if (!best || score > *best) {
      best = score;
      best_index = i;
    }
  }
  return best && best_index == cur;
}

struct QuestionRef {
  const SquadParagraph* paragraph;
  const SquadQuestion* question;
  size_t paragraph_index;  // over the whole dataset
};

std::vector<QuestionRef> questions_of(const SquadDataset& dataset) {
  std::vector<QuestionRef> out;
  size_t p = 0;
  for (const auto& article : dataset.articles)
    for (const auto& para : article.paragraphs) {
      for (const auto& qa : para.qas) out.push_back({&para, &qa, p});
      ++p;
    }
  return out;
}

// `text` quoted for a log line: JSON escapes (no raw newline), at most 60 code points.
std::string log_quoted(std::string_view text) {
  std::u32string cps = unicode::decode_utf8(text);
  const bool cut = cps.size() > 60;
  if (cut) cps.resize(60);
  return nlohmann::json(unicode::encode_utf8(cps)).dump() + (cut ? "..." : "");
}

// The answer's first and last word, or nullopt (with a warning) when run_squad.py would skip the
// example or fail on it.
std::optional<std::pair<int64_t, int64_t>> answer_words(const SquadQuestion& qa,
                                                        const SquadDocTokens& doc) {
  const SquadAnswer& answer = qa.answers.front();
  const std::u32string text = unicode::decode_utf8(answer.text);
  const auto length = static_cast<int64_t>(text.size());
  const auto chars = static_cast<int64_t>(doc.char_to_word.size());
  const auto skip = [&](const std::string& why) {
    log_warn(
        "SQuAD question '{}': {}; the example is skipped (as run_squad.py skips answers it "
        "cannot find)",
        qa.id, why);
    return std::nullopt;
  };
  if (length == 0) return skip("the answer text is empty");
  if (answer.start < 0) return skip("answer_start " + std::to_string(answer.start) + " < 0");
  if (answer.start > chars - length)
    return skip("the answer " + log_quoted(answer.text) + " at answer_start " +
                std::to_string(answer.start) + " runs past the context's end (" +
                std::to_string(chars) + " characters)");
  const int64_t start = doc.char_to_word[static_cast<size_t>(answer.start)];
  const int64_t end = doc.char_to_word[static_cast<size_t>(answer.start + length - 1)];
  if (start < 0)
    return skip("answer_start " + std::to_string(answer.start) +
                " is in the context's leading whitespace");
  // Only answers whose text is found in their words (whitespace collapsed) are kept.
  const std::string actual =
      join<std::string>(doc.words, static_cast<size_t>(start), static_cast<size_t>(end) + 1, " ");
  const std::u32string cleaned = join<std::u32string>(split_spaces(text), U" ");
  const std::string cleaned_utf8 = unicode::encode_utf8(cleaned);
  if (actual.find(cleaned_utf8) == std::string::npos)
    return skip("could not find the answer " + log_quoted(cleaned_utf8) + " at answer_start " +
                std::to_string(answer.start) + ", which holds " + log_quoted(actual));
  return std::pair{start, end};
}

// Logits ranked as _get_best_indexes does: highest first, ties in position order, the first n.
std::vector<int64_t> best_indexes(const std::vector<float>& logits, int n) {
  std::vector<int64_t> idx(logits.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i);
  const auto key = [&](int64_t i) {
    const float v = logits[static_cast<size_t>(i)];
    return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v;
  };
  // Python's stable sort: equal keys in position order, so this order is total.
  const auto before = [&](int64_t a, int64_t b) {
    return key(a) > key(b) || (key(a) == key(b) && a < b);
  };
  const size_t keep = std::min(idx.size(), static_cast<size_t>(n));
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(keep), idx.end(),
                    before);
  idx.resize(keep);
  return idx;
}

double logit_score(float v) {
  return std::isnan(v) ? -std::numeric_limits<double>::infinity() : static_cast<double>(v);
}

}  // namespace

int32_t SquadFeature::orig_word(int64_t position) const {
  const int64_t k = position - doc_offset;
  if (k < 0 || k >= static_cast<int64_t>(token_to_orig.size())) return -1;
  return token_to_orig[static_cast<size_t>(k)];
}

bool SquadFeature::is_max_context(int64_t position) const {
  const int64_t k = position - doc_offset;
  if (k < 0 || k >= static_cast<int64_t>(max_context.size())) return false;
  return max_context[static_cast<size_t>(k)] != 0;
}

SquadDocTokens squad_doc_tokens(std::string_view context) {
  SquadDocTokens d;
  bool prev_is_whitespace = true;
  for (char32_t c : unicode::decode_utf8(context)) {
    if (is_squad_whitespace(c)) {
      prev_is_whitespace = true;
    } else {
      if (prev_is_whitespace) d.words.emplace_back();
      unicode::append_utf8(c, d.words.back());
      prev_is_whitespace = false;
    }
    d.char_to_word.push_back(static_cast<int32_t>(d.words.size()) - 1);
  }
  return d;
}

std::vector<SquadFeature> make_squad_features(const SquadDataset& dataset,
                                              const Tokenizer& tokenizer,
                                              const SquadFeatureOptions& options, bool training) {
  const SquadFeatureOptions& o = options;
  ADA_CHECK_ARG(o.max_seq_length > o.max_query_length + 3, ConfigError)
      << "SQuAD features: max_seq_length (" << o.max_seq_length
      << ") must be greater than max_query_length (" << o.max_query_length << ") + 3";
  ADA_CHECK_ARG(o.max_query_length >= 0 && o.doc_stride >= 1, ConfigError)
      << "SQuAD features: max_query_length (" << o.max_query_length
      << ") must be >= 0 and doc_stride (" << o.doc_stride << ") >= 1";
  const SpecialIds& special = tokenizer.special_ids();
  std::vector<SquadFeature> features;
  const std::vector<QuestionRef> questions = questions_of(dataset);
  std::optional<DocPieces> doc;
  size_t doc_paragraph = 0;
  for (size_t example = 0; example < questions.size(); ++example) {
    const QuestionRef& q = questions[example];
    if (!doc || doc_paragraph != q.paragraph_index) {
      doc = doc_pieces(q.paragraph->context, tokenizer);
      doc_paragraph = q.paragraph_index;
    }
    const auto n_tokens = static_cast<int64_t>(doc->ids.size());

    int64_t tok_start = -1, tok_end = -1;
    if (training) {
      ADA_CHECK_ARG(q.question->answers.size() == 1, ConfigError)
          << "SQuAD question '" << q.question->id << "' has " << q.question->answers.size()
          << " answers; training features need exactly one (as in train-v1.1.json): make the "
             "features of an evaluation file with training = false";
      const auto words = answer_words(*q.question, doc->doc);
      if (!words) continue;
      const auto [start_word, end_word] = *words;
      tok_start = doc->orig_to_tok[static_cast<size_t>(start_word)];
      tok_end = end_word + 1 < static_cast<int64_t>(doc->doc.words.size())
                    ? doc->orig_to_tok[static_cast<size_t>(end_word + 1)] - 1
                    : n_tokens - 1;
      std::tie(tok_start, tok_end) = improve_answer_span(
          doc->ids, tok_start, tok_end, tokenizer.encode(q.question->answers.front().text));
    }

    std::vector<int32_t> query = tokenizer.encode(q.question->question);
    if (query.size() > static_cast<size_t>(o.max_query_length))
      query.resize(static_cast<size_t>(o.max_query_length));
    const int64_t max_tokens_for_doc = o.max_seq_length - static_cast<int64_t>(query.size()) - 3;

    std::vector<DocSpan> spans;
    for (int64_t start = 0; start < n_tokens;) {
      const int64_t length = std::min(n_tokens - start, max_tokens_for_doc);
      spans.push_back({start, length});
      if (start + length == n_tokens) break;
      start += std::min<int64_t>(length, o.doc_stride);
    }

    for (size_t s = 0; s < spans.size(); ++s) {
      const DocSpan& span = spans[s];
      SquadFeature f;
      f.example = static_cast<int64_t>(example);
      f.span = static_cast<int32_t>(s);
      f.input_ids.reserve(static_cast<size_t>(o.max_seq_length));
      f.input_ids.push_back(special.cls);
      f.input_ids.insert(f.input_ids.end(), query.begin(), query.end());
      f.input_ids.push_back(special.sep);
      f.segment_ids.assign(f.input_ids.size(), 0);
      f.doc_offset = static_cast<int32_t>(f.input_ids.size());
      f.doc_start = static_cast<int32_t>(span.start);
      for (int64_t i = 0; i < span.length; ++i) {
        const int64_t t = span.start + i;
        f.token_to_orig.push_back(doc->tok_to_orig[static_cast<size_t>(t)]);
        f.max_context.push_back(check_is_max_context(spans, s, t) ? 1 : 0);
        f.input_ids.push_back(doc->ids[static_cast<size_t>(t)]);
      }
      f.input_ids.push_back(special.sep);
      f.segment_ids.resize(f.input_ids.size(), 1);
      f.attention_mask.assign(f.input_ids.size(), 1);
      f.input_ids.resize(static_cast<size_t>(o.max_seq_length), special.pad);
      f.segment_ids.resize(static_cast<size_t>(o.max_seq_length), 0);
      f.attention_mask.resize(static_cast<size_t>(o.max_seq_length), 0);
      if (training) {
        const int64_t doc_end = span.start + span.length - 1;
        if (tok_start >= span.start && tok_end <= doc_end) {
          f.start_position = tok_start - span.start + f.doc_offset;
          f.end_position = tok_end - span.start + f.doc_offset;
        } else {
          f.start_position = f.end_position = 0;
        }
      }
      features.push_back(std::move(f));
    }
  }
  return features;
}

std::string squad_final_text(std::string_view pred_text, std::string_view orig_text,
                             const Tokenizer& tokenizer) {
  const std::u32string pred = unicode::decode_utf8(pred_text);
  const std::u32string orig = unicode::decode_utf8(orig_text);
  std::vector<std::u32string> words;
  for (const auto& w : tokenizer.basic_tokenize(orig_text))
    words.push_back(unicode::decode_utf8(w));
  const std::u32string tok = join<std::u32string>(words, U" ");
  const size_t found = tok.find(pred);
  if (found == std::u32string::npos) return std::string(orig_text);
  const auto start = static_cast<int64_t>(found);
  const int64_t end = start + static_cast<int64_t>(pred.size()) - 1;
  // _strip_spaces: the positions of the characters other than ' '.
  const auto strip = [](const std::u32string& s, std::vector<int64_t>& ns_to_s,
                        std::vector<int64_t>& s_to_ns) {
    s_to_ns.assign(s.size(), -1);
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] != U' ') {
        s_to_ns[i] = static_cast<int64_t>(ns_to_s.size());
        ns_to_s.push_back(static_cast<int64_t>(i));
      }
  };
  std::vector<int64_t> orig_ns_to_s, orig_s_to_ns, tok_ns_to_s, tok_s_to_ns;
  strip(orig, orig_ns_to_s, orig_s_to_ns);
  strip(tok, tok_ns_to_s, tok_s_to_ns);
  if (orig_ns_to_s.size() != tok_ns_to_s.size()) return std::string(orig_text);
  // With equal lengths every non-space position of `tok` maps to one of `orig`.
  const auto map = [&](int64_t tok_position) -> int64_t {
    if (tok_position < 0 || tok_position >= static_cast<int64_t>(tok.size())) return -1;
    const int64_t ns = tok_s_to_ns[static_cast<size_t>(tok_position)];
    return ns < 0 ? -1 : orig_ns_to_s[static_cast<size_t>(ns)];
  };
  const int64_t orig_start = map(start), orig_end = map(end);
  if (orig_start < 0 || orig_end < 0) return std::string(orig_text);
  if (orig_end < orig_start) return "";  // Python's empty slice
  return unicode::encode_utf8(std::u32string_view(orig).substr(
      static_cast<size_t>(orig_start), static_cast<size_t>(orig_end - orig_start + 1)));
}

std::map<std::string, std::string> squad_predictions(
    const SquadDataset& dataset, const Tokenizer& tokenizer,
    const std::vector<SquadFeature>& features, const std::vector<std::vector<float>>& start_logits,
    const std::vector<std::vector<float>>& end_logits, const SquadDecodeOptions& options) {
  ADA_CHECK_ARG(options.n_best_size >= 1 && options.max_answer_length >= 1, ConfigError)
      << "SQuAD decoding: n_best_size (" << options.n_best_size << ") and max_answer_length ("
      << options.max_answer_length << ") must be >= 1";
  ADA_CHECK_ARG(start_logits.size() == features.size() && end_logits.size() == features.size(),
                ShapeError)
      << "SQuAD decoding: " << features.size() << " features but " << start_logits.size()
      << " start and " << end_logits.size() << " end logit rows";
  const std::vector<QuestionRef> questions = questions_of(dataset);
  std::vector<std::vector<size_t>> by_example(questions.size());
  for (size_t i = 0; i < features.size(); ++i) {
    const SquadFeature& f = features[i];
    ADA_CHECK_ARG(f.example >= 0 && f.example < static_cast<int64_t>(questions.size()), IoError)
        << "SQuAD decoding: feature " << i << " is of question " << f.example
        << " but the dataset has " << questions.size() << " questions";
    ADA_CHECK_ARG(
        start_logits[i].size() == f.input_ids.size() && end_logits[i].size() == f.input_ids.size(),
        ShapeError)
        << "SQuAD decoding: feature " << i << " has " << f.input_ids.size() << " positions but "
        << start_logits[i].size() << " start and " << end_logits[i].size() << " end logits";
    by_example[static_cast<size_t>(f.example)].push_back(i);
  }

  std::map<std::string, std::string> out;
  std::optional<SquadDocTokens> doc;
  size_t doc_paragraph = 0;
  for (size_t example = 0; example < questions.size(); ++example) {
    const QuestionRef& q = questions[example];
    // The first of the best-scoring candidates in run_squad.py's order (features, start
    // indexes, end indexes; its sort is stable) is the head of its n-best list.
    std::optional<double> best;
    size_t best_feature = 0;
    int64_t best_start = 0, best_end = 0;
    for (size_t i : by_example[example]) {
      const SquadFeature& f = features[i];
      const auto starts = best_indexes(start_logits[i], options.n_best_size);
      const auto ends = best_indexes(end_logits[i], options.n_best_size);
      for (int64_t s : starts)
        for (int64_t e : ends) {
          // On document tokens (so inside the real tokens), the start in its max-context window.
          if (f.orig_word(s) < 0 || f.orig_word(e) < 0) continue;
          if (!f.is_max_context(s)) continue;
          if (e < s || e - s + 1 > options.max_answer_length) continue;
          const double score = logit_score(start_logits[i][static_cast<size_t>(s)]) +
                               logit_score(end_logits[i][static_cast<size_t>(e)]);
          if (!best || score > *best) {
            best = score;
            best_feature = i;
            best_start = s;
            best_end = e;
          }
        }
    }
    if (!best) {
      out[q.question->id] = "empty";
      continue;
    }
    if (!doc || doc_paragraph != q.paragraph_index) {
      doc = squad_doc_tokens(q.paragraph->context);
      doc_paragraph = q.paragraph_index;
    }
    const SquadFeature& f = features[best_feature];
    const int32_t orig_start = f.orig_word(best_start), orig_end = f.orig_word(best_end);
    ADA_CHECK_ARG(orig_end < static_cast<int32_t>(doc->words.size()) && orig_start <= orig_end,
                  IoError)
        << "SQuAD decoding: feature " << best_feature << " maps to context words " << orig_start
        << ".." << orig_end << " but question '" << q.question->id << "' has " << doc->words.size()
        << ": the features are not of this dataset";
    // The word pieces joined and de-tokenised, whitespace cleaned.
    std::u32string tok_text;
    for (int64_t p = best_start; p <= best_end; ++p) {
      if (p > best_start) tok_text += U' ';
      tok_text += unicode::decode_utf8(tokenizer.id_to_token(f.input_ids[static_cast<size_t>(p)]));
    }
    tok_text = replace_all(replace_all(tok_text, U" ##", U""), U"##", U"");
    const std::u32string pred = join<std::u32string>(split_spaces(tok_text), U" ");
    const std::string orig_text = join<std::string>(doc->words, static_cast<size_t>(orig_start),
                                                    static_cast<size_t>(orig_end) + 1, " ");
    out[q.question->id] = squad_final_text(unicode::encode_utf8(pred), orig_text, tokenizer);
  }
  return out;
}

void write_squad_predictions(const std::string& path,
                             const std::map<std::string, std::string>& predictions) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [id, text] : predictions) j[id] = text;
  std::string text;
  try {
    text = j.dump(4) + "\n";
  } catch (const nlohmann::json::type_error& e) {
    ADA_THROW(IoError) << path << ": cannot write the predictions (" << e.what() << ")";
  }
  write_file_atomically(path, text);
}

}  // namespace ada::data
