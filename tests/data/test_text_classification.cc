// Sentence classification data (data/text_classification.h): JSON Lines tokenised into
// [CLS] text [SEP] with padding and truncation, labels by their index in data.labels, "[SEP]" in
// a text read as text, and bad files and configs named with the line, the key and the fix.
#include "data/text_classification.h"

#include <gtest/gtest.h>

#include <fstream>

#include "base/error.h"
#include "util/error_of.h"
#include "util/temp_dir.h"

namespace ada::data {
namespace {

using ada::testing::error_of;

// Ids: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4, free 5, money 6, hello 7, bob 8, ! 9,
// sep 10, [ 11, ] 12.
Tokenizer tokenizer() {
  TokenizerOptions o;
  o.keep_special_tokens = false;
  return Tokenizer({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "free", "money", "hello", "bob",
                    "!", "sep", "[", "]"},
                   "test vocab", o);
}

std::string write(const ada::testing::TempDir& dir, const std::string& text) {
  const std::string path = (dir.path() / "d.jsonl").string();
  std::ofstream(path) << text;
  return path;
}

std::vector<int64_t> ids_of(const Example& e) {
  return e.at("input_ids").to_vector<int64_t>();
}

TEST(TextClassification, TokenisesPadsAndTruncates) {
  ada::testing::TempDir dir;
  const std::string path =
      write(dir, R"({"text": "FREE money!!", "label": "spam", "id": 7})"
                 "\n\n"
                 R"({"label": "ham", "text": "Hello Bob [SEP] free free free"})"
                 "\n");
  TextClassificationOptions o;
  o.seq_len = 8;
  o.labels = {"ham", "spam"};
  auto ds = TextClassificationDataset::open(path, tokenizer(), o);
  ASSERT_EQ(ds->size(), 2);  // the blank line is skipped
  const Example a = ds->get(0, 0);
  EXPECT_EQ(ids_of(a), (std::vector<int64_t>{2, 5, 6, 9, 9, 3, 0, 0}));
  EXPECT_EQ(a.at("attention_mask").to_vector<int64_t>(),
            (std::vector<int64_t>{1, 1, 1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(a.at("segment_ids").to_vector<int64_t>(), std::vector<int64_t>(8, 0));
  EXPECT_EQ(a.at("label").to_vector<int64_t>(), std::vector<int64_t>{1});
  EXPECT_EQ(a.at("label").dim(), 0);
  // "[SEP]" in the text is text ([, sep, ]); cut to 6 pieces between [CLS] and [SEP].
  const Example b = ds->get(1, 3);
  EXPECT_EQ(ids_of(b), (std::vector<int64_t>{2, 7, 8, 11, 10, 12, 5, 3}));
  EXPECT_EQ(b.at("attention_mask").to_vector<int64_t>(), std::vector<int64_t>(8, 1));
  EXPECT_EQ(b.at("label").to_vector<int64_t>(), std::vector<int64_t>{0});
  EXPECT_EQ(ds->class_counts(), (std::vector<int64_t>{1, 1}));
  EXPECT_NE(ds->describe().find("2 examples: ham 1, spam 1"), std::string::npos) << ds->describe();
}

// Long texts are tokenised only as far as the sequence needs (the data audit of stop 83: a text
// that starts with 5,000 spaces gave [CLS] [SEP] only), and a text without a word piece is kept
// as BertTokenizer keeps it, said once with its line.
TEST(TextClassification, LongLeadingRunsAndEmptyTexts) {
  ada::testing::TempDir dir;
  const std::string path = write(dir, R"({"label": "spam", "text": ")" + std::string(5000, ' ') +
                                          R"(free money hello bob free money"})"
                                          "\n"
                                          R"({"label": "ham", "text": ""})"
                                          "\n"
                                          R"({"label": "ham", "text": "hello bob"})"
                                          "\n");
  TextClassificationOptions o;
  o.seq_len = 6;
  o.labels = {"ham", "spam"};
  ::testing::internal::CaptureStderr();
  auto ds = TextClassificationDataset::open(path, tokenizer(), o);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(ds->size(), 3);
  EXPECT_EQ(ids_of(ds->get(0, 0)), (std::vector<int64_t>{2, 5, 6, 7, 8, 3}));
  EXPECT_EQ(ids_of(ds->get(1, 0)), (std::vector<int64_t>{2, 3, 0, 0, 0, 0}));
  EXPECT_NE(log.find("d.jsonl: 1 of 3 examples have no word piece"), std::string::npos) << log;
  EXPECT_NE(log.find("the first at line 2"), std::string::npos) << log;
  // A word the first prefix (64 bytes for 2 pieces) would cut after "money" is read whole:
  // "moneyxx...x" is one [UNK], never "money".
  o.seq_len = 4;
  const std::string cut = write(dir, R"({"label": "ham", "text": "free)" + std::string(55, ' ') +
                                         "money" + std::string(100, 'x') +
                                         R"( bob"})"
                                         "\n");
  EXPECT_EQ(ids_of(TextClassificationDataset::open(cut, tokenizer(), o)->get(0, 0)),
            (std::vector<int64_t>{2, 5, 1, 3}));
}

TEST(TextClassification, BadLinesAreNamed) {
  ada::testing::TempDir dir;
  TextClassificationOptions o;
  o.labels = {"ham", "spam"};
  auto err = [&](const std::string& text) {
    const std::string path = write(dir, text);
    return error_of<IoError>([&] { TextClassificationDataset::open(path, tokenizer(), o); });
  };
  const std::string good = R"({"text": "x", "label": "ham"})";
  EXPECT_NE(err(good + "\n{not json\n").find("d.jsonl:2: not a JSON object"), std::string::npos);
  EXPECT_NE(err(R"({"label": "ham"})").find("d.jsonl:1: needs a string field \"text\""),
            std::string::npos);
  EXPECT_NE(err(R"({"text": "x", "label": 1})")
                .find("d.jsonl:1: needs a string field \"label\" (one of ham, spam)"),
            std::string::npos);
  EXPECT_NE(err(good + "\n" + R"({"text": "x", "label": "eggs"})")
                .find("d.jsonl:2: label 'eggs' is not in data.labels (ham, spam)"),
            std::string::npos);
  EXPECT_NE(err("\n").find("no example in the file"), std::string::npos);
  EXPECT_NE(error_of<IoError>([&] {
              TextClassificationDataset::open((dir.path() / "missing.jsonl").string(), tokenizer(),
                                              o);
            }).find("tools/fetch_data.sh spam"),
            std::string::npos);
}

TEST(TextClassification, ConfigErrorsNameTheKey) {
  ada::testing::TempDir dir;
  const std::string path = write(dir, R"({"text": "x", "label": "ham"})");
  const std::string vocab = (dir.path() / "vocab.txt").string();
  {
    std::ofstream v(vocab);
    for (const char* t : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "x"}) v << t << "\n";
  }
  auto err = [&](const std::string& data, int64_t model_vocab, int64_t classes) {
    DatasetRequest q{
        Config::parse(
            "name: text_classification\npath: " + path + "\nvocab: " + vocab + "\n" + data,
            "c.yaml"),
        Config::parse("name: bert\nvocab_size: " + std::to_string(model_vocab), "c.yaml"), classes,
        1};
    return error_of<ConfigError>([&] { read_text_classification(q); });
  };
  EXPECT_NE(err("labels: [ham, spam, eggs]", 6, 2)
                .find("3 labels, but the model has 2 classes; set model.head: classification and "
                      "model.num_classes: 3"),
            std::string::npos);
  EXPECT_NE(err("labels: [ham, ham]", 6, 2).find("label 'ham' given twice"), std::string::npos);
  EXPECT_NE(err("labels: [ham, spam]\nseq_len: 600", 6, 2).find("model.max_positions"),
            std::string::npos);
  EXPECT_NE(err("labels: [ham, spam]", 7, 2).find("has 6 tokens, but model.vocab_size is 7"),
            std::string::npos);
  DatasetRequest ok{Config::parse("name: text_classification\npath: " + path + "\nvocab: " + vocab +
                                      "\nlabels: [ham, spam]\nseq_len: 4",
                                  "c.yaml"),
                    Config::parse("name: bert\nvocab_size: 6", "c.yaml"), 2, 1};
  const DataSets sets = read_text_classification(ok);
  EXPECT_EQ(sets.train->size(), 1);
  EXPECT_EQ(sets.eval, nullptr);
  EXPECT_EQ(ids_of(sets.train->get(0, 0)), (std::vector<int64_t>{2, 5, 3, 0}));
}

}  // namespace
}  // namespace ada::data
