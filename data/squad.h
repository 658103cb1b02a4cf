// SQuAD v1.1: the official JSON format (a dataset, and a predictions file mapping question ids to
// answer texts), read strictly, and the official evaluation (evaluate-v1.1.py): answers normalised
// (lower-cased, ASCII punctuation and the articles a, an, the removed, whitespace collapsed), exact
// match and token-overlap F1 against each gold answer, the best of them, averaged x 100. One
// difference: lower() works code point by code point, so a word-final capital sigma becomes σ
// where Python's str.lower() gives ς.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ada::data {

struct SquadAnswer {
  std::string text;
  int64_t start = 0;  // answer_start: a character offset into the context
};

struct SquadQuestion {
  std::string id, question;
  std::vector<SquadAnswer> answers;
};

struct SquadParagraph {
  std::string context;
  std::vector<SquadQuestion> qas;
};

struct SquadArticle {
  std::string title;
  std::vector<SquadParagraph> paragraphs;
};

struct SquadDataset {
  std::string version;  // "1.1" for SQuAD v1.1
  std::vector<SquadArticle> articles;
};

// IoError naming the file and the field (e.g. "data[2].paragraphs[0].qas[5].answers[1].text")
// for anything but the format: missing or mistyped fields, duplicate question ids, invalid UTF-8.
SquadDataset read_squad(const std::string& path);
// A predictions file: one JSON object of question id -> answer text.
std::map<std::string, std::string> read_squad_predictions(const std::string& path);

// The official normalisation of an answer.
std::string normalize_squad_answer(std::string_view text);
bool squad_exact_match(std::string_view prediction, std::string_view truth);
double squad_f1(std::string_view prediction, std::string_view truth);

struct SquadScore {
  double exact_match = 0, f1 = 0;  // percentages over every question of the dataset
  int64_t questions = 0;
  std::vector<std::string> unanswered;  // ids with no prediction (scored 0, as the official script)
};
SquadScore evaluate_squad(const SquadDataset& dataset,
                          const std::map<std::string, std::string>& predictions);

}  // namespace ada::data
