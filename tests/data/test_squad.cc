// SQuAD v1.1: the official normalisation, exact match and F1 on hand-computed cases, the
// dataset and predictions readers (bad files named with the field), and the evaluation's sums.
// tests/tools/squad_eval_twin.py compares the squad_eval command with a Python twin of the
// official script on random and Unicode answers.
#include <gtest/gtest.h>

#include <fstream>

#include "base/error.h"
#include "data/squad.h"
#include "util/error_of.h"
#include "util/temp_dir.h"

namespace ada::data {
namespace {

using ada::testing::error_of;

TEST(Squad, Normalisation) {
  EXPECT_EQ(normalize_squad_answer("The  Quick, brown fox!"), "quick brown fox");
  EXPECT_EQ(normalize_squad_answer("an apple a day"), "apple day");
  EXPECT_EQ(normalize_squad_answer("theatre, anathema, ants"),
            "theatre anathema ants");                         // words only
  EXPECT_EQ(normalize_squad_answer("the_end"), "theend");     // '_' is in string.punctuation
  EXPECT_EQ(normalize_squad_answer("A.D. 1066"), "ad 1066");  // punctuation first: "ad" stays
  EXPECT_EQ(normalize_squad_answer("Über   Straße\u00a0\u2003X"),
            "über straße x");                                 // Unicode spaces
  EXPECT_EQ(normalize_squad_answer("«the» end"), "« » end");  // « is not ASCII punctuation
  EXPECT_EQ(normalize_squad_answer("\u0130stanbul"), "i\u0307stanbul");  // Python's lower()
  EXPECT_EQ(normalize_squad_answer(" , . "), "");
}

TEST(Squad, ExactMatchAndF1ByHand) {
  EXPECT_TRUE(squad_exact_match("the Eiffel Tower.", "Eiffel tower"));
  EXPECT_FALSE(squad_exact_match("Eiffel", "Eiffel Tower"));
  // pred {eiffel}, gold {eiffel, tower}: precision 1, recall 1/2, F1 2/3.
  EXPECT_DOUBLE_EQ(squad_f1("Eiffel", "the Eiffel Tower"), 2.0 / 3.0);
  // pred {in, 1066, ad}, gold {1066}: P 1/3, R 1, F1 0.5.
  EXPECT_DOUBLE_EQ(squad_f1("in 1066 A.D.", "1066"), 0.5);
  // Repeated words count once per occurrence: pred {a-less: cat, cat, dog}, gold {cat, dog, dog}:
  // common {cat: 1, dog: 1} = 2, P 2/3, R 2/3, F1 2/3.
  EXPECT_DOUBLE_EQ(squad_f1("cat cat dog", "cat dog dog"), 2.0 / 3.0);
  EXPECT_EQ(squad_f1("", "anything"), 0.0);
  EXPECT_EQ(squad_f1("the", "a"), 0.0);  // both normalise to nothing
  EXPECT_TRUE(squad_exact_match("the", "a"));
  // Exactly Python's string.punctuation goes (every ASCII range's ends), letters and digits stay.
  EXPECT_TRUE(squad_exact_match(R"(x!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~y)", "xy"));
  for (const char* kept : {"x0y", "x9y", "xAy", "xZy", "xay", "xzy"})
    EXPECT_FALSE(squad_exact_match(kept, "xy")) << kept;
}

std::string write(const testing::TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = (dir.path() / name).string();
  std::ofstream(path) << text;
  return path;
}

const char kDataset[] = R"({"version": "1.1", "data": [{"title": "T", "paragraphs": [
  {"context": "The Eiffel Tower is in Paris. It was built in 1889.",
   "qas": [{"id": "q1", "question": "Where?", "answers": [{"text": "Paris", "answer_start": 23},
                                                           {"text": "in Paris", "answer_start": 20}]},
           {"id": "q2", "question": "When?", "answers": [{"text": "1889", "answer_start": 46}]},
           {"id": "q3", "question": "What?", "answers": [{"text": "The Eiffel Tower", "answer_start": 0}]}]}]}]})";

TEST(Squad, EvaluationAveragesTheBestOverGoldAnswers) {
  testing::TempDir dir;
  const SquadDataset d = read_squad(write(dir, "d.json", kDataset));
  ASSERT_EQ(d.articles.size(), 1u);
  EXPECT_EQ(d.version, "1.1");
  EXPECT_EQ(d.articles[0].paragraphs[0].qas[0].answers[1].start, 20);
  // q1 exact ("paris" = "paris"), q2 unanswered (0), q3 "Eiffel": F1 2/3, not exact.
  const auto preds =
      read_squad_predictions(write(dir, "p.json", R"({"q1": "Paris.", "q3": "Eiffel"})"));
  const SquadScore s = evaluate_squad(d, preds);
  EXPECT_EQ(s.questions, 3);
  EXPECT_EQ(s.unanswered, (std::vector<std::string>{"q2"}));
  EXPECT_DOUBLE_EQ(s.exact_match, 100.0 / 3);
  EXPECT_DOUBLE_EQ(s.f1, 100.0 * (1 + 2.0 / 3) / 3);
}

TEST(Squad, BadFilesNameTheField) {
  testing::TempDir dir;
  auto msg = [&](const std::string& text) {
    return error_of<IoError>([&] { read_squad(write(dir, "bad.json", text)); });
  };
  EXPECT_NE(msg("{\"data\": []}").find("bad.json: version is missing"), std::string::npos);
  EXPECT_NE(msg("{\"version\": \"1.1\", \"data\": {}}").find("data must be an array, got object"),
            std::string::npos);
  EXPECT_NE(msg(R"({"version": "1.1", "data": [{"paragraphs": [{"context": "c", "qas": [
              {"id": "x", "question": "q", "answers": [{"text": "t", "answer_start": "3"}]}]}]}]})")
                .find("data[0].paragraphs[0].qas[0].answers[0].answer_start must be an integer, "
                      "got string"),
            std::string::npos);
  EXPECT_NE(msg(R"({"version": "1.1", "data": [{"paragraphs": [{"context": "c", "qas": [
              {"id": "x", "question": "q", "answers": [{"text": "t", "answer_start": 0}]},
              {"id": "x", "question": "q", "answers": [{"text": "t", "answer_start": 0}]}]}]}]})")
                .find("data[0].paragraphs[0].qas[1].id: question id 'x' appears twice"),
            std::string::npos);
  EXPECT_NE(msg(R"({"version": "1.1", "data": [{"paragraphs": [{"context": "c", "qas": [
              {"id": "x", "question": "q", "answers": []}]}]}]})")
                .find("qas[0].answers is empty"),
            std::string::npos);
  // An offset past int64 was read as -1 (the data audit of stop 83); a negative one as itself.
  for (const char* start : {"18446744073709551615", "-2"})
    EXPECT_NE(
        msg(std::string(R"({"version": "1.1", "data": [{"paragraphs": [{"context": "c", "qas": [
              {"id": "x", "question": "q", "answers": [{"text": "t", "answer_start": )") +
            start + "}]}]}]}]}")
            .find(std::string("answer_start must be a character offset >= 0, got ") + start),
        std::string::npos)
        << start;
  EXPECT_NE(msg("{\"version\": \"1.1\", \"data\": [").find("bad.json: not JSON"),
            std::string::npos);
  EXPECT_NE(msg("{\"version\": \"1.1\", \"data\": [\"\xff\"]}").find("bad.json: not JSON"),
            std::string::npos);  // invalid UTF-8
  EXPECT_NE(error_of<IoError>([&] {
              read_squad((dir.path() / "none.json").string());
            }).find("cannot read"),
            std::string::npos);
  EXPECT_NE(error_of<IoError>([&] { read_squad(dir.path().string()); }).find("is a folder"),
            std::string::npos);
  EXPECT_NE(error_of<IoError>([&] {
              read_squad_predictions(write(dir, "p.json", "[\"a\"]"));
            }).find("p.json: predictions must be one JSON object"),
            std::string::npos);
  EXPECT_NE(error_of<IoError>([&] {
              read_squad_predictions(write(dir, "p.json", "{\"q\": 3}"));
            }).find("the prediction for 'q' must be a string, got number"),
            std::string::npos);
}

}  // namespace
}  // namespace ada::data
