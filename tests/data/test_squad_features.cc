// SQuAD features and predictions (data/squad_features.h) on crafted examples worked out by hand:
// the whitespace split, a long context in six windows (spans, max-context owners, ties, padding),
// labels at window edges and [CLS] when the answer is not wholly inside, Unicode offsets (code
// points) and answer spans narrowed to the answer's pieces, the n-best decoder choosing among
// hand-set logits, get_final_text's alignment, bad answers skipped with a warning, option and
// shape errors, predictions.json. tests/tools/squad_features_twin.py compares the same code with
// a Python twin of run_squad.py on random files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "base/error.h"
#include "data/squad_features.h"
#include "util/error_of.h"
#include "util/temp_dir.h"

namespace ada::data {
namespace {

using ada::testing::error_of;
using ::testing::HasSubstr;

// A vocabulary of the five special tokens (ids 0-4) and `words` (ids 5, 6, ...).
Tokenizer vocab(const std::vector<std::string>& words) {
  std::vector<std::string> tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  tokens.insert(tokens.end(), words.begin(), words.end());
  return Tokenizer(tokens, "test vocab");
}

SquadDataset one_paragraph(const std::string& context, std::vector<SquadQuestion> qas) {
  SquadDataset d;
  d.version = "1.1";
  d.articles.push_back({"t", {{context, std::move(qas)}}});
  return d;
}

SquadQuestion question(const std::string& id, const std::string& text,
                       const std::string& answer = "", int64_t start = 0) {
  return {id, text, {{answer, start}}};
}

// "w00 w01 ... w20": 21 words of one token each, word k at character 4k.
std::string words_context(int n) {
  std::string s;
  for (int k = 0; k < n; ++k)
    s += (k ? " w" : "w") + std::string(k < 10 ? "0" : "") + std::to_string(k);
  return s;
}
Tokenizer words_vocab() {
  std::vector<std::string> words = {"who", "?"};
  for (int k = 0; k < 30; ++k) words.push_back((k < 10 ? "w0" : "w") + std::to_string(k));
  return vocab(words);
}
int32_t wid(int k) {
  return 7 + k;
}  // the id of "wNN"

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(SquadFeatures, WhitespaceSplitAsRunSquad) {
  // ' ', \t, \r, \n and U+202F separate words; other spaces (U+00A0, U+3000) stay inside.
  const SquadDocTokens d = squad_doc_tokens(" Café\u202fnaïve\t\tA\u00a0B\u3000C\r\nx ");
  EXPECT_EQ(d.words, (std::vector<std::string>{"Café", "naïve", "A\u00a0B\u3000C", "x"}));
  // One entry per code point: -1 before the first word, a space belongs to the word before it.
  EXPECT_EQ(d.char_to_word, (std::vector<int32_t>{-1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1,
                                                  1,  1, 2, 2, 2, 2, 2, 2, 2, 3, 3}));
  EXPECT_TRUE(squad_doc_tokens("").words.empty());
  EXPECT_EQ(squad_doc_tokens("  ").char_to_word, (std::vector<int32_t>{-1, -1}));
}

TEST(SquadFeatures, LongContextInWindows) {
  const Tokenizer tok = words_vocab();
  // 21 one-token words; question "who?" (2 tokens); 13 positions leave 8 for the document, the
  // stride 3: windows start at sub-tokens 0, 3, 6, 9, 12 (8 each) and 15 (the last 6).
  const SquadDataset d = one_paragraph(words_context(21), {question("q0", "Who?")});
  const SquadFeatureOptions o{.max_seq_length = 13, .doc_stride = 3, .max_query_length = 8};
  const auto f = make_squad_features(d, tok, o, /*training=*/false);
  ASSERT_EQ(f.size(), 6u);
  const std::vector<int32_t> starts = {0, 3, 6, 9, 12, 15};
  for (size_t s = 0; s < f.size(); ++s) {
    EXPECT_EQ(f[s].example, 0);
    EXPECT_EQ(f[s].span, static_cast<int32_t>(s));
    EXPECT_EQ(f[s].doc_start, starts[s]);
    EXPECT_EQ(f[s].doc_offset, 4);  // [CLS] who ? [SEP]
    EXPECT_EQ(f[s].start_position, -1);
    EXPECT_EQ(f[s].end_position, -1);
    EXPECT_EQ(f[s].input_ids.size(), 13u);
    EXPECT_EQ(f[s].token_to_orig.size(), s < 5 ? 8u : 6u);
  }
  // The last window: [CLS] who ? [SEP] w15..w20 [SEP] [PAD] [PAD].
  EXPECT_EQ(f[5].input_ids, (std::vector<int32_t>{2, 5, 6, 3, wid(15), wid(16), wid(17), wid(18),
                                                  wid(19), wid(20), 3, 0, 0}));
  EXPECT_EQ(f[5].segment_ids, (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(f[5].attention_mask, (std::vector<int32_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(f[5].token_to_orig, (std::vector<int32_t>{15, 16, 17, 18, 19, 20}));
  EXPECT_EQ(f[1].orig_word(4), 3);
  EXPECT_EQ(f[1].orig_word(11), 10);
  EXPECT_EQ(f[1].orig_word(3), -1);   // [SEP]
  EXPECT_EQ(f[1].orig_word(12), -1);  // the last [SEP]
  EXPECT_EQ(f[1].orig_word(-1), -1);
  // Max context, min(left, right) + 0.01 * length by hand: sub-token t is owned by window
  // max(0, t / 3 - 1). Ties go to the first window (t = 5: 2 in windows 0 and 1; t = 8, 11,
  // 14 likewise); t = 17 scores 2 in windows 4 and 5, and window 4 wins by its length (8 > 6).
  for (const auto& w : f)
    for (size_t k = 0; k < w.token_to_orig.size(); ++k) {
      const int t = w.doc_start + static_cast<int>(k);
      EXPECT_EQ(w.is_max_context(w.doc_offset + static_cast<int64_t>(k)),
                std::max(0, t / 3 - 1) == w.span)
          << "sub-token " << t << " in window " << w.span;
    }
  EXPECT_FALSE(f[0].is_max_context(0));  // [CLS]
  EXPECT_FALSE(f[0].is_max_context(99));
}

TEST(SquadFeatures, TrainingLabelsAtWindowEdgesAndCls) {
  const Tokenizer tok = words_vocab();
  // q0: "w09 w10" (sub-tokens 9-10), q1: "w07 w08" (7-8), same windows as above.
  const SquadDataset d = one_paragraph(words_context(21), {question("q0", "Who?", "w09 w10", 36),
                                                           question("q1", "Who?", "w07 w08", 28)});
  const SquadFeatureOptions o{.max_seq_length = 13, .doc_stride = 3, .max_query_length = 8};
  const auto f = make_squad_features(d, tok, o, /*training=*/true);
  ASSERT_EQ(f.size(), 12u);
  std::vector<std::pair<int64_t, int64_t>> got;
  for (const auto& w : f) got.emplace_back(w.start_position, w.end_position);
  EXPECT_EQ(got, (std::vector<std::pair<int64_t, int64_t>>{
                     // q0: window 0 (0-7) lacks it: [CLS]; window 1 (3-10) ends on it (its right
                     // edge, positions 10-11); window 2 (6-13); window 3 (9-16) starts on it (left
                     // edge, positions 4-5); windows 4 and 5 lack it.
                     {0, 0},
                     {10, 11},
                     {7, 8},
                     {4, 5},
                     {0, 0},
                     {0, 0},
                     // q1: window 0 (0-7) holds only w07: not wholly inside, so [CLS].
                     {0, 0},
                     {8, 9},
                     {5, 6},
                     {0, 0},
                     {0, 0},
                     {0, 0}}));
  for (size_t i = 0; i < f.size(); ++i) EXPECT_EQ(f[i].example, i < 6 ? 0 : 1);
  // The labels point at the answer's tokens.
  EXPECT_EQ(f[1].input_ids[10], wid(9));
  EXPECT_EQ(f[1].input_ids[11], wid(10));
  EXPECT_EQ(f[3].input_ids[4], wid(9));
}

TEST(SquadFeatures, QuestionCutToMaxQueryLength) {
  const Tokenizer tok = words_vocab();
  const SquadDataset d = one_paragraph("w00 w01", {question("q", "w05 w06 w07 who ?")});
  const auto f = make_squad_features(
      d, tok, {.max_seq_length = 10, .doc_stride = 1, .max_query_length = 2}, false);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].input_ids,
            (std::vector<int32_t>{2, wid(5), wid(6), 3, wid(0), wid(1), 3, 0, 0, 0}));
  EXPECT_EQ(f[0].doc_offset, 4);
}

// The Unicode example: offsets count code points; the answer's words are narrowed to the
// pieces of the tokenised answer (_improve_answer_span).
const std::string kUnicodeContext = "Le Café «Paris», près de 北京. Steve Smith's team";
Tokenizer unicode_vocab() {
  return vocab({"le", "cafe", "«", "paris", "»", ",", "pres", "de", "北", "京", ".", "steve",
                "smith", "'", "s", "team", "where", "?"});
}

TEST(SquadFeatures, UnicodeOffsetsAndImprovedSpans) {
  const Tokenizer tok = unicode_vocab();
  // Code points: "Paris" starts at 9 (at byte 11), "北京" at 25, "Steve Smith" at 29.
  const SquadDataset d =
      one_paragraph(kUnicodeContext, {question("paris", "Where?", "Paris", 9),
                                      question("beijing", "Where?", "北京", 25),
                                      question("steve", "Where?", "Steve Smith", 29)});
  const auto f = make_squad_features(d, tok, {}, /*training=*/true);
  ASSERT_EQ(f.size(), 3u);
  // [CLS] where ? [SEP] le cafe « paris » , pres de 北 京 . steve smith ' s team [SEP]
  //   0     1   2   3   4   5   6   7    8 9  10  11 12 13 14  15    16   17 18 19   20
  EXPECT_EQ(f[0].input_ids[7], tok.token_to_id("paris"));
  EXPECT_EQ(f[0].token_to_orig,
            (std::vector<int32_t>{0, 1, 2, 2, 2, 2, 3, 4, 5, 5, 5, 6, 7, 7, 7, 8}));
  EXPECT_EQ(f[0].input_ids.size(), 384u);
  EXPECT_EQ(f[0].attention_mask[20], 1);
  EXPECT_EQ(f[0].attention_mask[21], 0);
  // "«Paris»," -> "paris" alone; "北京." -> "北 京"; "Steve Smith's" -> "steve smith".
  const auto label = [](const SquadFeature& w) {
    return std::vector{w.start_position, w.end_position};
  };
  EXPECT_EQ(label(f[0]), (std::vector<int64_t>{7, 7}));
  EXPECT_EQ(label(f[1]), (std::vector<int64_t>{12, 13}));
  EXPECT_EQ(label(f[2]), (std::vector<int64_t>{15, 16}));
}

TEST(SquadFeatures, FinalTextAlignment) {
  const Tokenizer tok = unicode_vocab();  // basic tokenisation only: the vocabulary plays no part
  // The examples of get_final_text's comment and its kin: the prediction's characters aligned
  // with the original's, spaces left out.
  EXPECT_EQ(squad_final_text("steve smith", "Steve Smith's", tok), "Steve Smith");
  EXPECT_EQ(squad_final_text("smith", "Steve Smith's", tok), "Smith");
  EXPECT_EQ(squad_final_text("s", "Smith's", tok), "S");  // the first "s" of "smith ' s"
  EXPECT_EQ(squad_final_text("paris", "«Paris»,", tok), "Paris");
  EXPECT_EQ(squad_final_text("cafe", "Café,", tok), "Café");   // accents stripped, aligned
  EXPECT_EQ(squad_final_text("北 京", "北京.", tok), "北京");  // CJK spaced out, aligned
  EXPECT_EQ(squad_final_text("istanbul", "İstanbul!", tok), "İstanbul");
  // Failures give the original span: not found; lengths differ once spaces are left out (a
  // no-break space, a combining accent dropped by the tokenizer).
  EXPECT_EQ(squad_final_text("lyon", "Steve Smith's", tok), "Steve Smith's");
  EXPECT_EQ(squad_final_text("new york", "New\u00a0York", tok), "New\u00a0York");
  EXPECT_EQ(squad_final_text("cafe", "Cafe\u0301", tok), "Cafe\u0301");
  EXPECT_EQ(squad_final_text("", "abc", tok), "abc");
}

TEST(SquadFeatures, DecoderPicksTheBestValidSpan) {
  const Tokenizer tok = words_vocab();
  const SquadDataset d = one_paragraph(words_context(21), {question("q0", "Who?")});
  const SquadFeatureOptions o{.max_seq_length = 13, .doc_stride = 3, .max_query_length = 8};
  const auto f = make_squad_features(d, tok, o, false);
  ASSERT_EQ(f.size(), 6u);
  std::vector<std::vector<float>> start(6, std::vector<float>(13, 0.f)), end = start;
  // The answer: w09 w10 in window 2 (positions 7-8; window 2 owns sub-token 9), score 10.
  start[2][7] = 5, end[2][8] = 5;
  // Higher scores that are invalid: in the question (window 0); a start outside its
  // max-context window (window 1 at sub-token 9, score 16); end before start (window 3, 14);
  // four tokens long (window 4, w15-w18, 12) when at most 3 are allowed.
  start[0][1] = 9, end[0][2] = 9;
  start[1][10] = 8, end[1][11] = 8;
  start[3][7] = 7, end[3][6] = 7;
  start[4][7] = 6, end[4][10] = 6;
  SquadDecodeOptions opt{.n_best_size = 20, .max_answer_length = 3};
  EXPECT_EQ(squad_predictions(d, tok, f, start, end, opt).at("q0"), "w09 w10");
  opt.max_answer_length = 4;  // now the four-token span wins
  EXPECT_EQ(squad_predictions(d, tok, f, start, end, opt).at("q0"), "w15 w16 w17 w18");
  // Equal scores: the first in run_squad.py's order (window, then start, then end rank).
  std::vector<std::vector<float>> s2(6, std::vector<float>(13, 0.f)), e2 = s2;
  s2[5][7] = 3, e2[5][8] = 3;  // w18 w19 in window 5 (which owns sub-token 18), score 6
  s2[0][4] = 3, e2[0][5] = 3;  // w00 w01 in window 0, score 6: first
  EXPECT_EQ(squad_predictions(d, tok, f, s2, e2, opt).at("q0"), "w00 w01");
  // Only the two best starts and ends are tried: [CLS] and the question give nothing valid.
  std::vector<std::vector<float>> s3(6, std::vector<float>(13, 0.f)), e3 = s3;
  for (auto* rows : {&s3, &e3})
    for (auto& row : *rows) row[0] = row[1] = 1;
  EXPECT_EQ(
      squad_predictions(d, tok, f, s3, e3, {.n_best_size = 2, .max_answer_length = 30}).at("q0"),
      "empty");
  // NaN ranks last.
  std::vector<std::vector<float>> s4(6, std::vector<float>(13, std::nanf(""))), e4 = s4;
  s4[2][7] = -50, e4[2][8] = -50;
  EXPECT_EQ(squad_predictions(d, tok, f, s4, e4, opt).at("q0"), "w09 w10");
}

TEST(SquadFeatures, DecoderMapsPiecesBackToTheOriginalText) {
  const Tokenizer tok = unicode_vocab();
  const SquadDataset d = one_paragraph(
      kUnicodeContext, {question("a", "Where?"), question("b", "Where?"), question("c", "Where?"),
                        question("d", "Where?"), question("e", "Where?")});
  const auto f = make_squad_features(d, tok, {}, false);
  ASSERT_EQ(f.size(), 5u);
  std::vector<std::vector<float>> start(5, std::vector<float>(384, 0.f)), end = start;
  const std::vector<std::pair<int, int>> spans = {{7, 7}, {12, 13}, {15, 16}, {5, 5}, {15, 18}};
  for (size_t i = 0; i < spans.size(); ++i) {
    start[i][static_cast<size_t>(spans[i].first)] = 4;
    end[i][static_cast<size_t>(spans[i].second)] = 4;
  }
  const auto p = squad_predictions(d, tok, f, start, end);
  EXPECT_EQ(p.at("a"), "Paris");
  EXPECT_EQ(p.at("b"), "北京");
  EXPECT_EQ(p.at("c"), "Steve Smith");
  EXPECT_EQ(p.at("d"), "Café");
  EXPECT_EQ(p.at("e"), "Steve Smith's");
  EXPECT_EQ(p.size(), 5u);
}

TEST(SquadFeatures, MismatchedAnswersSkippedWithAWarning) {
  const Tokenizer tok = unicode_vocab();
  const SquadDataset d = one_paragraph(
      kUnicodeContext,
      {question("good", "Where?", "Paris", 9), question("wrong-text", "Where?", "Lyon", 9),
       question("byte-offset", "Where?", "北京", 29),  // its UTF-8 offset, not the code point
       question("past-end", "Where?", "team!", 44), question("empty", "Where?", "", 3),
       question("good2", "Where?", "team", 43)});
  ::testing::internal::CaptureStderr();
  const auto f = make_squad_features(d, tok, {}, /*training=*/true);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].example, 0);
  EXPECT_EQ(f[1].example, 5);  // indexes stay those of the dataset
  EXPECT_EQ(f[1].start_position, 19);
  for (const char* id : {"wrong-text", "byte-offset", "past-end", "empty"})
    EXPECT_THAT(log, HasSubstr("SQuAD question '" + std::string(id) + "'"));
  EXPECT_THAT(log, HasSubstr("could not find the answer \"Lyon\" at answer_start 9, which holds "
                             "\"«Paris»,\""));
  EXPECT_THAT(log, HasSubstr("runs past the context's end (47 characters)"));
  EXPECT_EQ(log.find("'good'"), std::string::npos);
  // Without training the answers are not looked at.
  EXPECT_EQ(make_squad_features(d, tok, {}, false).size(), 6u);
}

TEST(SquadFeatures, Errors) {
  const Tokenizer tok = words_vocab();
  SquadDataset d = one_paragraph("w00 w01", {question("q", "who", "w01", 4)});
  EXPECT_THAT(error_of<ConfigError>([&] {
                make_squad_features(d, tok, {.max_seq_length = 67, .max_query_length = 64}, false);
              }),
              HasSubstr("max_seq_length (67) must be greater than max_query_length (64) + 3"));
  EXPECT_THAT(error_of<ConfigError>([&] { make_squad_features(d, tok, {.doc_stride = 0}, false); }),
              HasSubstr("doc_stride (0) >= 1"));
  d.articles[0].paragraphs[0].qas[0].answers.push_back({"w00", 0});
  EXPECT_THAT(error_of<ConfigError>([&] { make_squad_features(d, tok, {}, true); }),
              HasSubstr("question 'q' has 2 answers; training features need exactly one"));
  const auto f = make_squad_features(d, tok, {}, false);
  std::vector<std::vector<float>> rows(1, std::vector<float>(384, 0.f)), none;
  EXPECT_THAT(error_of<ShapeError>([&] { squad_predictions(d, tok, f, none, none); }),
              HasSubstr("1 features but 0 start and 0 end logit rows"));
  std::vector<std::vector<float>> short_rows(1, std::vector<float>(10, 0.f));
  EXPECT_THAT(error_of<ShapeError>([&] { squad_predictions(d, tok, f, rows, short_rows); }),
              HasSubstr("feature 0 has 384 positions but 384 start and 10 end logits"));
  auto other = f;
  other[0].example = 3;
  EXPECT_THAT(error_of<IoError>([&] { squad_predictions(d, tok, other, rows, rows); }),
              HasSubstr("feature 0 is of question 3 but the dataset has 1 questions"));
  EXPECT_THAT(
      error_of<ConfigError>([&] { squad_predictions(d, tok, f, rows, rows, {.n_best_size = 0}); }),
      HasSubstr("n_best_size (0)"));
}

TEST(SquadFeatures, PredictionsFile) {
  ada::testing::TempDir dir;
  const std::string path = dir / "predictions.json";
  write_squad_predictions(path, {{"q2", "Café «Paris»"}, {"q1", "北京"}, {"q3", "say \"hi\""}});
  EXPECT_EQ(read_text(path),
            "{\n    \"q1\": \"北京\",\n    \"q2\": \"Café «Paris»\",\n    \"q3\": \"say "
            "\\\"hi\\\"\"\n}\n");
  const auto back = read_squad_predictions(path);
  EXPECT_EQ(back.at("q2"), "Café «Paris»");
  EXPECT_EQ(back.size(), 3u);
  // Scored by the official logic: "北京" against the gold answer.
  const SquadDataset d = one_paragraph("北京", {question("q1", "?", "北京", 0)});
  EXPECT_EQ(evaluate_squad(d, {{"q1", back.at("q1")}}).exact_match, 100.0);
  EXPECT_THAT(error_of<IoError>([&] { write_squad_predictions(dir / "no/such/dir/p.json", {}); }),
              HasSubstr("no/such/dir"));
}

}  // namespace
}  // namespace ada::data
