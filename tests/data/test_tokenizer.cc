// The BERT WordPiece tokenizer: golden ids from tools/make_tokenizer_golden.py (an independent
// Python reference of HuggingFace's BertTokenizer) for a tiny committed vocabulary and, when
// tools/fetch_data.sh has fetched it, bert-base-uncased's real one; hand-checked tricky cases;
// the Unicode helpers; vocabulary errors; and the tokenize program.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/tokenizer.h"
#include "data/unicode.h"
#include "data_test_util.h"

namespace ada::data {
namespace {

using testing::expect_error;
using testing::TempDir;

const std::string kBertDir = std::string(ADA_TEST_DATA_DIR) + "/data/bert";
const std::string kTinyVocab = kBertDir + "/tiny_vocab.txt";
const std::string kFullVocab = std::string(ADA_DATA_DIR) + "/bert/vocab.txt";

struct GoldenCase {
  std::string name, text;
  std::vector<int32_t> ids;
};

std::vector<GoldenCase> read_golden(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<GoldenCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string hex, ids, name;
    std::getline(fields, hex, '\t');
    std::getline(fields, ids, '\t');
    std::getline(fields, name);
    GoldenCase c;
    c.name = name;
    for (size_t i = 0; i + 1 < hex.size(); i += 2)
      c.text.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    std::istringstream is(ids);
    int32_t id;
    while (is >> id) c.ids.push_back(id);
    cases.push_back(c);
  }
  return cases;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& t : v) {
    if (!s.empty()) s.push_back(' ');
    s += t;
  }
  return s;
}

TEST(Tokenizer, TinyVocabGolden) {
  const Tokenizer tok = Tokenizer::from_file(kTinyVocab);
  const auto cases = read_golden(kBertDir + "/tokenizer_tiny.tsv");
  ASSERT_GE(cases.size(), 30u);
  for (const auto& c : cases) EXPECT_EQ(tok.encode(c.text), c.ids) << "case '" << c.name << "'";
}

// The real vocabulary: expected ids recorded from the Python reference, which agrees with
// tokenizers.js (HuggingFace's JS port) on these cases except the two documented in the tool.
TEST(Tokenizer, BertBaseUncasedGolden) {
  ASSERT_TRUE(std::filesystem::exists(kFullVocab))
      << kFullVocab << " not fetched: run tools/fetch_data.sh bert-vocab (tools/test.sh does)";
  const Tokenizer tok = Tokenizer::from_file(kFullVocab);
  ASSERT_EQ(tok.vocab_size(), 30522);
  EXPECT_EQ(tok.token_to_id("the"), 1996);
  EXPECT_EQ(tok.token_to_id("##ing"), 2075);
  EXPECT_EQ(tok.special_ids().cls, 101);
  EXPECT_EQ(tok.special_ids().sep, 102);
  EXPECT_EQ(tok.special_ids().mask, 103);
  EXPECT_EQ(tok.special_ids().unk, 100);
  EXPECT_EQ(tok.special_ids().pad, 0);
  const auto cases = read_golden(kBertDir + "/tokenizer_bert_base_uncased.tsv");
  ASSERT_GE(cases.size(), 30u);
  for (const auto& c : cases) EXPECT_EQ(tok.encode(c.text), c.ids) << "case '" << c.name << "'";
  // A few by hand (well-known bert-base-uncased ids).
  EXPECT_EQ(tok.encode("Hello, world!"), (std::vector<int32_t>{7592, 1010, 2088, 999}));
  EXPECT_EQ(tok.encode("don't"), (std::vector<int32_t>{2123, 1005, 1056}));
  EXPECT_EQ(join(tok.tokenize("unaffable")), "una ##ffa ##ble");
  // The vocabulary's longest entry (18 characters) is one piece: the longest-match window spans it.
  EXPECT_EQ(tok.encode("Telecommunications"), (std::vector<int32_t>{12108}));
}

TEST(Tokenizer, TrickyCasesByHand) {
  const Tokenizer tok = Tokenizer::from_file(kTinyVocab);
  EXPECT_EQ(join(tok.tokenize("unaffable")), "un ##aff ##able");
  EXPECT_EQ(join(tok.tokenize("Café naïve RÉSUMÉ")), "cafe naive resume");
  EXPECT_EQ(join(tok.tokenize("Cafe\u0301")), "cafe");  // decomposed accent
  EXPECT_EQ(join(tok.tokenize("don't!!")), "don ' t ! !");
  EXPECT_EQ(join(tok.tokenize("中文字")), "中 文 [UNK]");
  EXPECT_EQ(join(tok.tokenize("北京")), "北 京");
  EXPECT_EQ(join(tok.tokenize("quiz")), "[UNK]");    // "##z" is not in the tiny vocab
  EXPECT_EQ(join(tok.tokenize("hello😀")), "[UNK]");  // an emoji is not punctuation
  EXPECT_EQ(join(tok.tokenize("hello 😀 world")), "hello [UNK] world");
  EXPECT_EQ(join(tok.tokenize(std::string(101, 'a'))), "[UNK]");
  const auto hundred = tok.tokenize(std::string(100, 'a'));
  ASSERT_EQ(hundred.size(), 100u);
  EXPECT_EQ(hundred[0], "a");
  EXPECT_EQ(hundred[99], "##a");
  EXPECT_EQ(join(tok.tokenize(std::string("hel\0lo\x01 wor\u200bld\xef\xbf\xbd!", 20))),
            "hello world !");
  EXPECT_EQ(join(tok.tokenize("[CLS] hello [SEP]")), "[CLS] hello [SEP]");
  EXPECT_EQ(join(tok.tokenize("a[MASK]b")), "a [MASK] b");
  EXPECT_EQ(join(tok.tokenize("[mask]")), "[ m ##a ##s ##k ]");  // special tokens are case-exact
  TokenizerOptions plain;
  plain.keep_special_tokens = false;
  EXPECT_EQ(join(Tokenizer::from_file(kTinyVocab, plain).tokenize("[CLS]")), "[ c ##l ##s ]");
  // The options' other settings, as BertTokenizer's do_lower_case=False (no lower-casing, accents
  // kept) and tokenize_chinese_chars=False (ideographs stay inside their word).
  TokenizerOptions cased, no_cjk;
  cased.lower_case = false;
  no_cjk.tokenize_cjk = false;
  EXPECT_EQ(join(Tokenizer::from_file(kTinyVocab, cased).basic_tokenize("Café RÉSUMÉ")),
            "Café RÉSUMÉ");
  EXPECT_EQ(join(Tokenizer::from_file(kTinyVocab, no_cjk).basic_tokenize("a北京b 中")),
            "a北京b 中");
  EXPECT_EQ(join(tok.basic_tokenize("a北京b 中")), "a 北 京 b 中");

  // Basic tokenisation only (no vocabulary effects).
  EXPECT_EQ(join(tok.basic_tokenize("ΟΔΟΣ")), "οδοσ");  // per-code-point lower(): no final sigma
  EXPECT_EQ(join(tok.basic_tokenize("Straße İstanbul")), "straße istanbul");
  EXPECT_EQ(join(tok.basic_tokenize("a\u2028b\u00a0c\u3000d\te\r\nf")), "a b c d e f");
  EXPECT_EQ(join(tok.basic_tokenize("a\x0b"
                                    "b\x0c"
                                    "c")),
            "abc");                                              // \v \f are controls: dropped
  EXPECT_EQ(join(tok.basic_tokenize("ガ")), "カ");               // the voicing mark is Mn
  EXPECT_EQ(tok.basic_tokenize("한")[0], "\u1112\u1161\u11ab");  // Hangul -> jamo
  EXPECT_EQ(join(tok.basic_tokenize("a^b`c~d$e")), "a ^ b ` c ~ d $ e");
  EXPECT_EQ(join(tok.basic_tokenize("«x»—y…")), "« x » — y …");
  EXPECT_EQ(join(tok.basic_tokenize("x\u1fefy")), "x ` y");          // decomposes to ASCII '`'
  EXPECT_EQ(join(tok.basic_tokenize("co\u00adop \ue000")), "coop");  // Cf and Co dropped
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_TRUE(tok.encode(" \t\n ").empty());
}

TEST(Tokenizer, DecodeAndHash) {
  const Tokenizer tok = Tokenizer::from_file(kTinyVocab);
  EXPECT_EQ(tok.decode(tok.encode("Hello, unaffable world")), "hello , unaffable world");
  std::ifstream in(kTinyVocab, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(tok.vocab_hash(), fnv1a64(bytes.data(), bytes.size()));
  EXPECT_EQ(tok.token_to_id("[UNK]"), tok.special_ids().unk);
  EXPECT_EQ(tok.token_to_id("no-such-token"), -1);
  EXPECT_EQ(tok.id_to_token(tok.token_to_id("hello")), "hello");
  EXPECT_THROW(tok.id_to_token(tok.vocab_size()), InternalError);
}

TEST(Tokenizer, BadVocabularies) {
  TempDir dir;
  auto write = [&](const std::string& name, const std::string& content) {
    std::ofstream(dir / name, std::ios::binary) << content;
    return dir / name;
  };
  const std::string missing = dir / "nope.txt";
  expect_error<IoError>([&] { Tokenizer::from_file(missing); },
                        {missing, "cannot open", "tools/fetch_data.sh bert-vocab"});
  const std::string empty = write("empty.txt", "");
  expect_error<IoError>([&] { Tokenizer::from_file(empty); }, {empty, "empty"});
  const std::string dup = write("dup.txt", "[PAD]\n[UNK]\nthe\nthe\n");
  expect_error<IoError>([&] { Tokenizer::from_file(dup); }, {dup, "line 4", "repeats line 3"});
  const std::string blank = write("blank.txt", "[PAD]\n[UNK]\n\nthe\n");
  expect_error<IoError>([&] { Tokenizer::from_file(blank); }, {blank, "line 3", "empty token"});
  const std::string nounk = write("nounk.txt", "[PAD]\nthe\n");
  expect_error<IoError>([&] { Tokenizer::from_file(nounk); },
                        {nounk, "has no [UNK], [CLS], [SEP], [MASK] token"});
  // Every special token BERT needs, named: here only [MASK] is missing.
  const std::string nomask = write("nomask.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n");
  expect_error<IoError>(
      [&] { Tokenizer::from_file(nomask); },
      {nomask, "(5 tokens) has no [MASK] token", "one per line", "tools/fetch_data.sh bert-vocab"});
  const std::string bad = write("bad.txt", "[UNK]\nab\xff\n");
  expect_error<IoError>([&] { Tokenizer::from_file(bad); }, {bad, "line 2", "UTF-8"});
  // CRLF line ends are tolerated.
  const std::string crlf =
      write("crlf.txt", "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\n[MASK]\r\nhello\r\n");
  EXPECT_EQ(Tokenizer::from_file(crlf).encode("Hello"), (std::vector<int32_t>{5}));
}

TEST(Unicode, Helpers) {
  using namespace unicode;
  EXPECT_STREQ(version(), "14.0.0");
  EXPECT_EQ(decode_utf8("a\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80"),
            (std::u32string{U'a', 0xE9, 0x4E2D, 0x1F600}));
  // Invalid: stray continuation, overlong, surrogate, truncated.
  EXPECT_EQ(decode_utf8("\x80"
                        "a\xc0\xaf"
                        "b\xed\xa0\x80"
                        "c\xe4\xb8"),
            (std::u32string{0xFFFD, U'a', 0xFFFD, 0xFFFD, U'b', 0xFFFD, 0xFFFD, 0xFFFD, U'c',
                            0xFFFD, 0xFFFD}));
  EXPECT_FALSE(valid_utf8("\xc0\xaf"));
  EXPECT_TRUE(valid_utf8("h\xc3\xa9llo"));
  EXPECT_EQ(encode_utf8(U"h\u00e9\U0001F600"), "h\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(nfd(U"\u00e9"), (std::u32string{U'e', 0x301}));
  EXPECT_EQ(nfd(U"\u1e69"), (std::u32string{U's', 0x323, 0x307}));         // ṩ: two levels
  EXPECT_EQ(nfd(U"q\u0307\u0323"), (std::u32string{U'q', 0x323, 0x307}));  // reordered by ccc
  EXPECT_EQ(nfd(U"\uac01"), (std::u32string{0x1100, 0x1161, 0x11A8}));     // 각
  EXPECT_EQ(nfd(U"\u212b"), (std::u32string{U'A', 0x30A}));                // Ångström sign
  EXPECT_EQ(props(U','), kPunct);
  EXPECT_EQ(props(U'\u00bf'), kPunct);
  EXPECT_EQ(props(U'\u0301'), kMn);
  EXPECT_EQ(props(U'\u4e2d'), kCjk | kWord);
  EXPECT_EQ(props(U'\u00ad'), kControl);
  EXPECT_EQ(props(U'\u3000'), kWhitespace | kSpace);
  EXPECT_EQ(props(U'\u2028'), kSpace);
  EXPECT_EQ(props(U'a'), kWord);  // str.isalnum(): re's \w
  EXPECT_EQ(props(U'_'), kPunct | kWord);
  EXPECT_EQ(props(U'\u0663'), kWord);   // ARABIC-INDIC DIGIT THREE
  EXPECT_EQ(props(U'\u00ab'), kPunct);  // «: punctuation, not a word character
  EXPECT_EQ(props(U'\u20ac'), 0);       // €: neither
  std::u32string low;
  for (char32_t c : U"AÉΣİЖ") append_lower(c, low);
  EXPECT_EQ(low, (std::u32string{U'a', 0xE9, 0x3C3, U'i', 0x307, 0x436, 0}));
}

// ---- the tokenize program
// -------------------------------------------------------------------------

std::string self_dir() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
}

// Runs `cmd` through the shell; returns its exit status and stdout (stderr folded in with 2>&1).
std::pair<int, std::string> run(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(TokenizeTool, IdsPerLineAndErrors) {
  const std::string bin = self_dir() + "/tokenize";
  ASSERT_TRUE(std::filesystem::exists(bin))
      << bin << " not built (cmake --build --target tokenize)";
  TempDir dir;
  const Tokenizer tok = Tokenizer::from_file(kTinyVocab);
  const std::vector<std::string> lines = {"Hello, world!", "", "Café naïve don't!!",
                                          "中文字 [MASK]", std::string(101, 'a') + " quiz"};
  {
    std::ofstream in(dir / "in.txt", std::ios::binary);
    for (const auto& l : lines) in << l << "\n";
  }
  auto [rc, out] = run("'" + bin + "' --vocab '" + kTinyVocab + "' < '" + (dir / "in.txt") + "'");
  ASSERT_EQ(rc, 0) << out;
  std::istringstream is(out);
  std::string got;
  for (const auto& l : lines) {
    ASSERT_TRUE(std::getline(is, got)) << "missing output line for '" << l << "'";
    std::string want;
    for (int32_t id : tok.encode(l)) {
      if (!want.empty()) want.push_back(' ');
      want += std::to_string(id);
    }
    EXPECT_EQ(got, want) << "line '" << l << "'";
  }
  EXPECT_FALSE(std::getline(is, got)) << "extra output: " << got;

  auto [rc_t, tokens] =
      run("echo 'unaffable Hello' | '" + bin + "' --vocab '" + kTinyVocab + "' --print tokens");
  EXPECT_EQ(rc_t, 0);
  EXPECT_EQ(tokens, "un ##aff ##able hello\n");

  const std::string missing = dir / "missing_vocab.txt";
  auto [rc_m, msg] = run("echo hi | '" + bin + "' --vocab '" + missing + "' 2>&1");
  EXPECT_EQ(rc_m, 1);
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;
  EXPECT_NE(msg.find("fetch_data.sh"), std::string::npos) << msg;
  auto [rc_u, usage] = run("'" + bin + "' --frobnicate 2>&1");
  EXPECT_EQ(rc_u, 1);
  EXPECT_NE(usage.find("usage: tokenize"), std::string::npos) << usage;
}

}  // namespace
}  // namespace ada::data
