// Fuzz target: the WordPiece tokenizer (data/tokenizer.h) and its vocabulary reader.
// Input: one mode byte, then bytes. Mode even: the bytes are text, tokenised with the test
// vocabulary (tests/data/bert/tiny_vocab.txt): encode, tokenize, basic_tokenize, decode. Mode
// odd: the bytes are a vocab.txt, read with Tokenizer::from_file; an accepted vocabulary then
// tokenises a fixed text and its own tokens.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "fuzz_util.h"

#ifndef ADA_FUZZ_TINY_VOCAB
#error "ADA_FUZZ_TINY_VOCAB (path of tests/data/bert/tiny_vocab.txt) must be defined"
#endif

using ada::data::Tokenizer;
using ada::fuzz::expect_clean;

namespace {

void exercise(const Tokenizer& tok, const std::string& text) {
  const std::vector<int32_t> ids = tok.encode(text);
  for (int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size()) std::abort();
  const std::vector<std::string> pieces = tok.tokenize(text);
  if (pieces.size() != ids.size()) std::abort();
  (void)tok.basic_tokenize(text);
  (void)tok.decode(ids);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const Tokenizer tiny = Tokenizer::from_file(ADA_FUZZ_TINY_VOCAB);
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) == 0) {
    expect_clean([&] { exercise(tiny, bytes); });
    return 0;
  }
  const std::string path = ada::fuzz::write_scratch("vocab.txt", bytes.data(), bytes.size());
  expect_clean([&] {
    const Tokenizer tok = Tokenizer::from_file(path);
    exercise(tok, "Hello, [CLS] unaffable world! [MASK] \xc3\xa9t\xc3\xa9 \xe4\xb8\xad ##ing");
    exercise(tok, bytes);
  });
  return 0;
}
