// prepare_mlm: tokenises a text corpus once into MLM shards (format: data/mlm_shards.h) that
// MlmDataset memory-maps for BERT pre-training.
//   prepare_mlm --vocab data/bert/vocab.txt --out data/mlm data/corpus
// Inputs are files and folders; a folder is walked recursively and its regular files (names
// starting with '.' skipped; only names ending in --ext if given) are taken in path order.
// Files are UTF-8 text. The document rule (--docs):
//   blank-line (default)  a line holding only spaces/tabs ends the current document, as does
//                         the end of a file (BERT's create_pretraining_data input format);
//   file                  each file is one document; blank lines are ignored.
// Every other line is one segment (a "sentence" for NSP pairs); a line that tokenises to nothing
// is dropped, and so is a document left without segments. A shard is closed once it holds
// --shard-tokens tokens; documents never straddle shards. Shards are OUT/PREFIX-00000.mlm, ...,
// each written atomically (temporary file, fsync, rename); numbered shards of the same prefix
// left over from an earlier, larger run are removed at the end.
// Held-out evaluation set (--eval-out DIR --eval-fraction F): the k-th document (k = 0, 1, ...
// over the non-empty documents, in input order) goes to DIR instead of OUT when
// floor((k + 1) F) > floor(k F): floor(D F) documents, evenly spread, the same on every run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "apps/common/cli.h"
#include "base/error.h"
#include "base/same_files.h"
#include "data/mlm_shards.h"
#include "data/tokenizer.h"
#include "data/unicode.h"

namespace {
using namespace ada;
namespace fs = std::filesystem;

bool blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\f\v") == std::string::npos;
}

std::vector<std::string> list_inputs(const std::vector<std::string>& inputs,
                                     const std::string& ext) {
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<std::string> found;
      fs::recursive_directory_iterator it(in, fs::directory_options::skip_permission_denied, ec),
          end;
      ADA_CHECK_ARG(!ec, IoError) << "cannot list folder " << in << ": " << ec.message();
      for (; it != end; it.increment(ec)) {
        ADA_CHECK_ARG(!ec, IoError) << "cannot list folder " << in << ": " << ec.message();
        const std::string name = it->path().filename().string();
        if (!name.empty() && name[0] == '.') {
          if (it->is_directory()) it.disable_recursion_pending();
          continue;
        }
        if (!it->is_regular_file()) continue;
        if (!ext.empty() && (name.size() < ext.size() ||
                             name.compare(name.size() - ext.size(), ext.size(), ext) != 0))
          continue;
        found.push_back(it->path().string());
      }
      ADA_CHECK_ARG(!found.empty(), IoError)
          << "folder " << in << " holds no input files" << (ext.empty() ? "" : " ending in " + ext);
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      ADA_CHECK_ARG(fs::is_regular_file(in, ec), IoError)
          << "input " << in << " is neither a file nor a folder (does it exist?)";
      files.push_back(in);
    }
  }
  // A file given twice (itself and its folder, or by two paths) would be tokenised twice.
  SameFiles seen;
  for (const std::string& f : files) {
    const std::string before = seen.add(f, f);
    ADA_CHECK_ARG(before.empty(), IoError) << "input " << f << " is listed twice (also as "
                                           << before << "); its documents would be written "
                                           << "twice: list it once";
  }
  return files;
}

std::string shard_name(const std::string& dir, const std::string& prefix, size_t k) {
  char num[16];
  std::snprintf(num, sizeof(num), "%05zu", k);
  return (fs::path(dir) / (prefix + "-" + num + ".mlm")).string();
}

// One output folder: its shards as they are written, and their totals.
struct Output {
  explicit Output(std::string d) : dir(std::move(d)) {}
  std::string dir;
  std::vector<std::string> written;
  std::unique_ptr<data::MlmShardWriter> w;
  uint64_t docs = 0, segs = 0, toks = 0;

  void close_shard() {
    if (!w) return;
    w->finish();
    docs += w->num_documents();
    segs += w->num_segments();
    toks += w->num_tokens();
    w.reset();
  }
  // The writer for a new document: a new shard once the current one holds `shard_tokens`.
  data::MlmShardWriter& writer(const std::string& prefix, uint64_t shard_tokens,
                               const data::MlmVocabInfo& info) {
    if (w && w->num_tokens() >= shard_tokens) close_shard();
    if (!w) {
      written.push_back(shard_name(dir, prefix, written.size()));
      w = std::make_unique<data::MlmShardWriter>(written.back(), info);
    }
    return *w;
  }
  // Closes the last shard (an empty one if none was written, so the run is visible) and removes
  // higher-numbered shards of an earlier run with the same prefix.
  void finish(const std::string& prefix, const data::MlmVocabInfo& info) {
    close_shard();
    if (written.empty()) {
      written.push_back(shard_name(dir, prefix, 0));
      data::MlmShardWriter(written.back(), info).finish();
    }
    std::error_code ec;
    for (size_t k = written.size();; ++k) {
      const std::string stale = shard_name(dir, prefix, k);
      if (!fs::exists(stale)) break;
      fs::remove(stale, ec);
      std::cout << "removed stale shard " << stale << "\n";
    }
  }
};

int run(int argc, char** argv) {
  std::string vocab, out, docs = "blank-line", prefix = "shard", ext, eval_out;
  double eval_fraction = 0;
  uint64_t shard_tokens = 16777216;
  bool verify = false;
  std::vector<std::string> inputs;
  CLI::App app(
      "Tokenises a text corpus once into MLM shards (data/mlm_shards.h) for BERT pre-training",
      "prepare_mlm");
  app.add_option("INPUT", inputs, "UTF-8 text files or folders (walked recursively, in path order)")
      ->required();
  app.add_option("--vocab", vocab,
                 "BERT vocab.txt (tools/fetch_data.sh bert-vocab: data/bert/vocab.txt)")
      ->required();
  app.add_option("--out", out, "where the shards go (created if missing)")->required();
  app.add_option(
         "--docs", docs,
         "blank-line (default): blank lines separate documents; file: one document per file")
      ->check(CLI::IsMember({"blank-line", "file"}));
  app.add_option("--shard-tokens", shard_tokens,
                 "tokens per shard before a new one starts (default 16777216)")
      ->check(CLI::Validator(
          [](const std::string& v) {
            return v.find_first_not_of("0123456789") == std::string::npos &&
                           std::strtoull(v.c_str(), nullptr, 10) > 0
                       ? std::string()
                       : "need a positive integer, got " + v;
          },
          "N > 0"));
  app.add_option("--prefix", prefix, "shard names NAME-00000.mlm ... (default shard)")
      ->check([](const std::string& v) {
        return v.empty() || v.find('/') != std::string::npos
                   ? std::string("need a plain file-name prefix")
                   : "";
      });
  app.add_option("--ext", ext, "only files whose names end in SUFFIX (e.g. .txt)");
  app.add_option("--eval-out", eval_out,
                 "also write a held-out evaluation set to DIR (not the --out folder itself)");
  app.add_option("--eval-fraction", eval_fraction,
                 "share of the documents (0 < F < 1) that go to --eval-out, every (1/F)-th in "
                 "input order (e.g. 0.02)")
      ->check(CLI::Validator(
          [](const std::string& v) {
            char* end = nullptr;
            const double f = std::strtod(v.c_str(), &end);
            return *end == '\0' && f > 0 && f < 1
                       ? std::string()
                       : "need a number strictly between 0 and 1, got " + v;
          },
          "F in (0, 1)"));
  app.add_flag("--verify", verify, "re-open every shard written and check it fully");
  if (!cli::parse_command_line(app, argc, argv,
                               "prepare_mlm --vocab FILE --out DIR [options] INPUT..."))
    return 0;
  if (eval_out.empty() != (eval_fraction == 0))
    ADA_THROW(ConfigError) << "--eval-out and --eval-fraction go together: give both (e.g. "
                              "--eval-out data/mlm-eval --eval-fraction 0.02) or neither";

  const auto t0 = std::chrono::steady_clock::now();
  const data::Tokenizer tok = data::Tokenizer::from_file(vocab);
  const data::SpecialIds& sp = tok.special_ids();  // all five present: Tokenizer checks them
  const std::vector<std::string> files = list_inputs(inputs, ext);
  std::error_code ec;
  for (const std::string& d : {out, eval_out}) {
    if (d.empty()) continue;
    fs::create_directories(d, ec);
    ADA_CHECK_ARG(fs::is_directory(d), IoError)
        << "cannot create output folder " << d << ": " << ec.message();
  }
  // The trainer reads every *.mlm of a folder: evaluation shards inside --out would be trained on.
  if (!eval_out.empty()) {
    ADA_CHECK_ARG(fs::weakly_canonical(eval_out) != fs::weakly_canonical(out), ConfigError)
        << "--eval-out " << eval_out << " is the --out folder; the trainer would train on the "
        << "evaluation shards too: give it a folder of its own (e.g. " << out << "-eval)";
  }

  const data::MlmVocabInfo info = data::MlmVocabInfo::of(tok);
  Output train(out), eval(eval_out);
  uint64_t unk = 0, bytes = 0, doc_no = 0;
  // Whether the next document goes to the evaluation set (see the rule at the top).
  auto next_is_eval = [&]() {
    const uint64_t k = doc_no++;
    if (eval_out.empty()) return false;
    return std::floor(static_cast<double>(k + 1) * eval_fraction) >
           std::floor(static_cast<double>(k) * eval_fraction);
  };

  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    ADA_CHECK_ARG(in.good(), IoError) << "cannot open input " << f;
    std::string line;
    data::MlmShardWriter* doc = nullptr;  // the writer of the open document, if any
    for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
      bytes += line.size() + 1;
      // The tokenizer would drop each invalid byte, and what it spells, without a word.
      ADA_CHECK_ARG(data::unicode::valid_utf8(line), IoError)
          << "input " << f << " line " << lineno << " is not UTF-8 text (a compressed or binary "
          << "file, or another encoding); convert it (e.g. iconv -f latin1 -t utf-8) or leave "
          << "the file out";
      if (blank(line)) {
        if (docs == "blank-line" && doc) {
          doc->end_document();
          doc = nullptr;
        }
        continue;
      }
      std::vector<int32_t> ids = tok.encode(line);
      if (ids.empty()) continue;
      for (int32_t id : ids) unk += id == sp.unk;
      if (!doc)  // a new shard only between documents
        doc = next_is_eval() ? &eval.writer(prefix, shard_tokens, info)
                             : &train.writer(prefix, shard_tokens, info);
      doc->add_segment(ids);
    }
    ADA_CHECK_ARG(!in.bad(), IoError) << "read error in input " << f;
    if (doc) doc->end_document();
  }
  if (!eval_out.empty()) {
    const uint64_t n_eval = eval.w ? eval.docs + eval.w->num_documents() : eval.docs;
    ADA_CHECK_ARG(n_eval > 0 && n_eval < doc_no, ConfigError)
        << "--eval-fraction " << eval_fraction << " puts " << n_eval << " of the " << doc_no
        << " documents into the evaluation set; both sets need at least one (raise the fraction "
        << "to at least " << 1.0 / static_cast<double>(std::max<uint64_t>(doc_no, 1))
        << " or add documents)";
  }
  ADA_CHECK_ARG(doc_no > 0, IoError)
      << "the inputs hold no text to tokenise (empty, blank, or only characters the tokenizer "
         "drops): no shard written";
  train.finish(prefix, info);
  if (!eval_out.empty()) eval.finish(prefix, info);
  if (verify)
    for (const Output* o : {&train, &eval})
      for (const std::string& s : o->written) data::MlmShard::open(s)->verify();

  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  char summary[512];
  std::snprintf(summary, sizeof(summary),
                "%zu files, %.1f MB -> %zu shard(s) in %s: %llu documents, %llu segments, %llu "
                "tokens (%.4f%% [UNK]) in %.1f s%s",
                files.size(), static_cast<double>(bytes) / 1e6, train.written.size(), out.c_str(),
                static_cast<unsigned long long>(train.docs),
                static_cast<unsigned long long>(train.segs),
                static_cast<unsigned long long>(train.toks),
                train.toks + eval.toks
                    ? 100.0 * static_cast<double>(unk) / static_cast<double>(train.toks + eval.toks)
                    : 0.0,
                secs, verify ? ", verified" : "");
  std::cout << "prepare_mlm: " << summary << "\n";
  if (!eval_out.empty())
    std::cout << "prepare_mlm: evaluation set (1 document in " << 1.0 / eval_fraction
              << "): " << eval.written.size() << " shard(s) in " << eval_out << ": " << eval.docs
              << " documents, " << eval.segs << " segments, " << eval.toks << " tokens\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "prepare_mlm: " << e.what() << "\n";
    return 1;
  }
}
