// tokenize: BERT WordPiece tokenisation of lines of text, as HuggingFace's BertTokenizer
// (bert-base-uncased) does it. Reads UTF-8 lines on stdin; prints one line per input line.
//   tokenize --vocab data/bert/vocab.txt < text.txt            # space-separated token ids
//   tokenize --vocab FILE --print tokens                      # word pieces instead of ids
//   tokenize --vocab FILE --print basic                       # words before word pieces
// No [CLS]/[SEP] are added. Exit status 1 with a message on a missing or malformed vocabulary.
#include <iostream>
#include <string>

#include "apps/common/cli.h"
#include "base/error.h"
#include "data/tokenizer.h"

namespace {
using namespace ada;

int run(int argc, char** argv) {
  std::string vocab, what = "ids";
  bool no_special = false;
  CLI::App app("BERT WordPiece tokenisation of stdin lines (as bert-base-uncased)", "tokenize");
  app.add_option("--vocab", vocab,
                 "vocab.txt, one token per line (tools/fetch_data.sh bert-vocab writes "
                 "data/bert/vocab.txt)")
      ->required();
  app.add_option("--print", what,
                 "ids (default): token ids; tokens: word pieces; basic: words before word-piece "
                 "splitting")
      ->check(CLI::IsMember({"basic", "ids", "tokens"}));
  app.add_flag("--no-special-tokens", no_special,
               "treat the text [CLS], [SEP], [PAD], [UNK], [MASK] as plain text");
  if (!cli::parse_command_line(
          app, argc, argv,
          "tokenize --vocab FILE [--print ids|tokens|basic] [--no-special-tokens] < lines"))
    return 0;
  data::TokenizerOptions opt;
  opt.keep_special_tokens = !no_special;
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
