#include "data/squad.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/error.h"
#include "data/unicode.h"

namespace ada::data {
namespace {

using Json = nlohmann::json;

Json parse_file(const std::string& path) {
  std::error_code ec;
  ADA_CHECK_ARG(!std::filesystem::is_directory(path, ec), IoError)
      << path << ": is a folder; a SQuAD data set is one JSON file (e.g. train-v1.1.json)";
  std::ifstream in(path, std::ios::binary);
  ADA_CHECK_ARG(in.good(), IoError) << "cannot read " << path;
  std::stringstream text;
  text << in.rdbuf();
  try {
    return Json::parse(text.str());
  } catch (const Json::parse_error& e) {
    ADA_THROW(IoError) << path << ": not JSON (" << e.what() << ")";
  }
}

// The field `key` of `obj` (at `where`), of the type `is` checks; IoError naming it otherwise.
const Json& field(const std::string& path, const Json& obj, const std::string& where,
                  const char* key, bool (Json::*is)() const noexcept, const char* type) {
  ADA_CHECK_ARG(obj.is_object(), IoError) << path << ": " << where << " must be an object";
  const auto it = obj.find(key);
  const std::string name = where.empty() ? key : where + "." + key;
  ADA_CHECK_ARG(it != obj.end(), IoError) << path << ": " << name << " is missing";
  ADA_CHECK_ARG(((*it).*is)(), IoError)
      << path << ": " << name << " must be " << type << ", got " << it->type_name();
  return *it;
}

std::string at(const std::string& where, const char* key, size_t i) {
  return where + (where.empty() ? "" : ".") + key + "[" + std::to_string(i) + "]";
}

bool is_ascii_punct(char32_t c) {
  return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
         (c >= 123 && c <= 126);
}

bool is_space(char32_t c) {
  return (unicode::props(c) & unicode::kSpace) != 0;
}
bool is_word(char32_t c) {
  return (unicode::props(c) & unicode::kWord) != 0;
}

// str.split(): the runs between Unicode whitespace.
std::vector<std::u32string> split(const std::u32string& s) {
  std::vector<std::u32string> out;
  std::u32string cur;
  for (char32_t c : s) {
    if (is_space(c)) {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

std::vector<std::u32string> normalized_tokens(std::string_view text) {
  // lower(): Python's str.lower(), code point by code point.
  std::u32string lower;
  for (char32_t c : unicode::decode_utf8(text)) unicode::append_lower(c, lower);
  // remove_punc(): string.punctuation is ASCII only.
  std::u32string kept;
  for (char32_t c : lower)
    if (!is_ascii_punct(c)) kept.push_back(c);
  // remove_articles(): re.sub(r'\b(a|an|the)\b', ' ', text) replaces exactly the maximal runs of
  // word characters (re's \w) that are a, an or the.
  std::u32string no_articles;
  for (size_t i = 0; i < kept.size();) {
    if (!is_word(kept[i])) {
      no_articles.push_back(kept[i++]);
      continue;
    }
    size_t j = i;
    while (j < kept.size() && is_word(kept[j])) ++j;
    const std::u32string word = kept.substr(i, j - i);
    no_articles += (word == U"a" || word == U"an" || word == U"the") ? U" " : word;
    i = j;
  }
  return split(no_articles);  // white_space_fix() then split(): the same words
}

}  // namespace

SquadDataset read_squad(const std::string& path) {
  const Json doc = parse_file(path);
  // Predictions (question id -> answer text) where a dataset was expected: arguments swapped?
  const bool predictions =
      doc.is_object() && !doc.empty() && !doc.contains("version") &&
      std::all_of(doc.begin(), doc.end(), [](const Json& v) { return v.is_string(); });
  ADA_CHECK_ARG(!predictions, IoError)
      << path << ": a predictions file (question id -> answer text), not a SQuAD dataset (with "
      << "'version' and 'data'); is it the other file? (squad_eval takes DATASET PREDICTIONS)";
  SquadDataset d;
  d.version = field(path, doc, "", "version", &Json::is_string, "a string").get<std::string>();
  const Json& data = field(path, doc, "", "data", &Json::is_array, "an array");
  std::set<std::string> ids;
  for (size_t a = 0; a < data.size(); ++a) {
    const std::string wa = at("", "data", a);
    SquadArticle article;
    if (data[a].is_object() && data[a].contains("title"))
      article.title =
          field(path, data[a], wa, "title", &Json::is_string, "a string").get<std::string>();
    const Json& paragraphs = field(path, data[a], wa, "paragraphs", &Json::is_array, "an array");
    for (size_t p = 0; p < paragraphs.size(); ++p) {
      const std::string wp = at(wa, "paragraphs", p);
      SquadParagraph para;
      para.context = field(path, paragraphs[p], wp, "context", &Json::is_string, "a string")
                         .get<std::string>();
      const Json& qas = field(path, paragraphs[p], wp, "qas", &Json::is_array, "an array");
      for (size_t q = 0; q < qas.size(); ++q) {
        const std::string wq = at(wp, "qas", q);
        SquadQuestion question;
        question.id =
            field(path, qas[q], wq, "id", &Json::is_string, "a string").get<std::string>();
        ADA_CHECK_ARG(ids.insert(question.id).second, IoError)
            << path << ": " << wq << ".id: question id '" << question.id << "' appears twice";
        question.question =
            field(path, qas[q], wq, "question", &Json::is_string, "a string").get<std::string>();
        const Json& answers = field(path, qas[q], wq, "answers", &Json::is_array, "an array");
        ADA_CHECK_ARG(!answers.empty(), IoError)
            << path << ": " << wq << ".answers is empty; SQuAD v1.1 questions have an answer";
        for (size_t k = 0; k < answers.size(); ++k) {
          const std::string wk = at(wq, "answers", k);
          SquadAnswer answer;
          answer.text =
              field(path, answers[k], wk, "text", &Json::is_string, "a string").get<std::string>();
          const Json& start =
              field(path, answers[k], wk, "answer_start", &Json::is_number_integer, "an integer");
          ADA_CHECK_ARG(start.is_number_unsigned() && start.get<uint64_t>() <= (uint64_t{1} << 62),
                        IoError)
              << path << ": " << wk << ".answer_start must be a character offset >= 0, got "
              << start.dump();
          answer.start = start.get<int64_t>();
          question.answers.push_back(std::move(answer));
        }
        para.qas.push_back(std::move(question));
      }
      article.paragraphs.push_back(std::move(para));
    }
    d.articles.push_back(std::move(article));
  }
  return d;
}

std::map<std::string, std::string> read_squad_predictions(const std::string& path) {
  const Json doc = parse_file(path);
  ADA_CHECK_ARG(doc.is_object(), IoError)
      << path << ": predictions must be one JSON object of question id -> answer text, got "
      << doc.type_name();
  std::map<std::string, std::string> out;
  for (const auto& [id, answer] : doc.items()) {
    ADA_CHECK_ARG(answer.is_string(), IoError) << path << ": the prediction for '" << id
                                               << "' must be a string, got " << answer.type_name();
    out[id] = answer.get<std::string>();
  }
  return out;
}

std::string normalize_squad_answer(std::string_view text) {
  std::u32string joined;
  for (const auto& w : normalized_tokens(text)) joined += (joined.empty() ? U"" : U" ") + w;
  return unicode::encode_utf8(joined);
}

bool squad_exact_match(std::string_view prediction, std::string_view truth) {
  return normalize_squad_answer(prediction) == normalize_squad_answer(truth);
}

double squad_f1(std::string_view prediction, std::string_view truth) {
  const auto pred = normalized_tokens(prediction), gold = normalized_tokens(truth);
  std::map<std::u32string, int64_t> counts;
  for (const auto& w : gold) ++counts[w];
  int64_t same = 0;
  for (const auto& w : pred)
    if (auto it = counts.find(w); it != counts.end() && it->second > 0) --it->second, ++same;
  if (same == 0) return 0;
  // As the official script computes it, operation for operation.
  const double precision = 1.0 * static_cast<double>(same) / static_cast<double>(pred.size());
  const double recall = 1.0 * static_cast<double>(same) / static_cast<double>(gold.size());
  return (2 * precision * recall) / (precision + recall);
}

SquadScore evaluate_squad(const SquadDataset& dataset,
                          const std::map<std::string, std::string>& predictions) {
  SquadScore s;
  double exact = 0, f1 = 0;
  for (const auto& article : dataset.articles)
    for (const auto& para : article.paragraphs)
      for (const auto& qa : para.qas) {
        ++s.questions;
        const auto it = predictions.find(qa.id);
        if (it == predictions.end()) {
          s.unanswered.push_back(qa.id);
          continue;
        }
        bool em = false;
        double best = 0;
        for (const auto& a : qa.answers) {
          em = em || squad_exact_match(it->second, a.text);
          best = std::max(best, squad_f1(it->second, a.text));
        }
        exact += em ? 1 : 0;
        f1 += best;
      }
  if (s.questions > 0) {
    s.exact_match = 100.0 * exact / static_cast<double>(s.questions);
    s.f1 = 100.0 * f1 / static_cast<double>(s.questions);
  }
  return s;
}

}  // namespace ada::data
