// tokenize: BERT WordPiece tokenisation of lines of text, as HuggingFace's BertTokenizer
// (bert-base-uncased) does it. Reads UTF-8 lines on stdin; prints one line per input line.
//   tokenize --vocab data/bert/vocab.txt < text.txt            # space-separated token ids
//   tokenize --vocab FILE --print tokens                      # word pieces instead of ids
//   tokenize --vocab FILE --print basic                       # words before word pieces
// No [CLS]/[SEP] are added. Exit status 1 with a message on a missing or malformed vocabulary.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>

#include "apps/common/cli.h"
#include "base/error.h"
#include "data/tokenizer.h"
#include "data/unicode.h"

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

  struct stat in_stat {};
  ADA_CHECK_ARG(fstat(0, &in_stat) != 0 || !S_ISDIR(in_stat.st_mode), IoError)
      << "standard input is a folder; tokenize reads lines of text (tokenize --vocab FILE < "
         "text.txt)";
  std::ios::sync_with_stdio(false);
  std::string line, out;
  for (int64_t lineno = 1; std::getline(std::cin, line); ++lineno) {
    // The tokenizer would drop each invalid byte, and what it spells, without a word.
    ADA_CHECK_ARG(data::unicode::valid_utf8(line), IoError)
        << "standard input line " << lineno << " is not UTF-8 text; convert it (e.g. iconv -f "
        << "latin1 -t utf-8)";
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
  ADA_CHECK_ARG(std::cout.good(), IoError)
      << "cannot write the output (" << std::strerror(errno) << "; a full disk?)";
  return 0;
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
