// tokenize: BERT WordPiece tokenisation of lines of text, as HuggingFace's BertTokenizer
// (bert-base-uncased) does it. Reads UTF-8 lines on stdin; prints one line per input line.
//   tokenize --vocab data/bert/vocab.txt < text.txt            # space-separated token ids
//   tokenize --vocab FILE --print tokens                      # word pieces instead of ids
//   tokenize --vocab FILE --print basic                       # words before word pieces
// No [CLS]/[SEP] are added. Exit status 1 with a message on a missing or malformed vocabulary.
#include <iostream>
#include <string>

#include "core/error.h"
#include "data/tokenizer.h"

namespace {
using namespace ada;

const char* kUsage =
    "usage: tokenize --vocab FILE [--print ids|tokens|basic] [--no-special-tokens] < lines\n"
    "  --vocab FILE         vocab.txt, one token per line (tools/fetch_data.sh bert-vocab writes\n"
    "                       data/bert/vocab.txt)\n"
    "  --print WHAT         ids (default): token ids; tokens: word pieces; basic: words before\n"
    "                       word-piece splitting\n"
    "  --no-special-tokens  treat the text [CLS], [SEP], [PAD], [UNK], [MASK] as plain text";

int run(int argc, char** argv) {
  std::string vocab, what = "ids";
  data::TokenizerOptions opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) ADA_THROW(ConfigError) << a << " needs a value\n" << kUsage;
      return argv[++i];
    };
    if (a == "--vocab") {
      vocab = value();
    } else if (a == "--print") {
      what = value();
      if (what != "ids" && what != "tokens" && what != "basic")
        ADA_THROW(ConfigError) << "--print " << what << ": known: basic, ids, tokens";
    } else if (a == "--no-special-tokens") {
      opt.keep_special_tokens = false;
    } else if (a == "-h" || a == "--help") {
      std::cout << kUsage << "\n";
      return 0;
    } else {
      ADA_THROW(ConfigError) << "unknown option '" << a << "'\n" << kUsage;
    }
  }
  if (vocab.empty()) ADA_THROW(ConfigError) << "--vocab is required\n" << kUsage;
  const data::Tokenizer tok = data::Tokenizer::from_file(vocab, opt);

  std::ios::sync_with_stdio(false);
  std::string line, out;
  while (std::getline(std::cin, line)) {
    out.clear();
    if (what == "ids") {
      for (int32_t id : tok.encode(line)) {
        if (!out.empty()) out.push_back(' ');
        out += std::to_string(id);
      }
    } else {
      for (const std::string& t :
           what == "tokens" ? tok.tokenize(line) : tok.basic_tokenize(line)) {
        if (!out.empty()) out.push_back(' ');
        out += t;
      }
    }
    out.push_back('\n');
    std::cout << out;
  }
  std::cout.flush();
  return std::cout.good() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "tokenize: " << e.what() << "\n";
    return 1;
  }
}
