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
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/mlm_shards.h"
#include "data/tokenizer.h"

namespace {
using namespace ada;
namespace fs = std::filesystem;

const char* kUsage =
    "usage: prepare_mlm --vocab FILE --out DIR [options] INPUT...\n"
    "  INPUT               text files or folders (walked recursively, in path order)\n"
    "  --vocab FILE        BERT vocab.txt (tools/fetch_data.sh bert-vocab: data/bert/vocab.txt)\n"
    "  --out DIR           where the shards go (created if missing)\n"
    "  --docs RULE         blank-line (default): blank lines separate documents;\n"
    "                      file: one document per file\n"
    "  --shard-tokens N    tokens per shard before a new one starts (default 16777216)\n"
    "  --prefix NAME       shard names NAME-00000.mlm ... (default shard)\n"
    "  --ext SUFFIX        only files whose names end in SUFFIX (e.g. .txt)\n"
    "  --verify            re-open every shard written and check it fully";

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
  return files;
}

std::string shard_name(const std::string& dir, const std::string& prefix, size_t k) {
  char num[16];
  std::snprintf(num, sizeof(num), "%05zu", k);
  return (fs::path(dir) / (prefix + "-" + num + ".mlm")).string();
}

int run(int argc, char** argv) {
  std::string vocab, out, docs = "blank-line", prefix = "shard", ext;
  uint64_t shard_tokens = 16777216;
  bool verify = false;
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) ADA_THROW(ConfigError) << a << " needs a value\n" << kUsage;
      return argv[++i];
    };
    if (a == "--vocab") {
      vocab = value();
    } else if (a == "--out") {
      out = value();
    } else if (a == "--docs") {
      docs = value();
      if (docs != "blank-line" && docs != "file")
        ADA_THROW(ConfigError) << "--docs " << docs << ": known: blank-line, file";
    } else if (a == "--shard-tokens") {
      const std::string v = value();
      try {
        shard_tokens = std::stoull(v);
      } catch (const std::exception&) {
        shard_tokens = 0;
      }
      if (shard_tokens == 0)
        ADA_THROW(ConfigError) << "--shard-tokens " << v << ": need a positive integer";
    } else if (a == "--prefix") {
      prefix = value();
      if (prefix.empty() || prefix.find('/') != std::string::npos)
        ADA_THROW(ConfigError) << "--prefix '" << prefix << "': need a plain file-name prefix";
    } else if (a == "--ext") {
      ext = value();
    } else if (a == "--verify") {
      verify = true;
    } else if (a == "-h" || a == "--help") {
      std::cout << kUsage << "\n";
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      ADA_THROW(ConfigError) << "unknown option '" << a << "'\n" << kUsage;
    } else {
      inputs.push_back(a);
    }
  }
  if (vocab.empty() || out.empty() || inputs.empty())
    ADA_THROW(ConfigError) << "--vocab, --out and at least one INPUT are required\n" << kUsage;

  const auto t0 = std::chrono::steady_clock::now();
  const data::Tokenizer tok = data::Tokenizer::from_file(vocab);
  const data::SpecialIds& sp = tok.special_ids();
  ADA_CHECK_ARG(sp.cls >= 0 && sp.sep >= 0 && sp.mask >= 0 && sp.pad >= 0, IoError)
      << "vocabulary " << vocab
      << " lacks [CLS], [SEP], [MASK] or [PAD]; MLM needs a BERT vocab.txt";
  const std::vector<std::string> files = list_inputs(inputs, ext);
  std::error_code ec;
  fs::create_directories(out, ec);
  ADA_CHECK_ARG(fs::is_directory(out), IoError)
      << "cannot create output folder " << out << ": " << ec.message();

  const data::MlmVocabInfo info = data::MlmVocabInfo::of(tok);
  std::vector<std::string> written;
  std::unique_ptr<data::MlmShardWriter> w;
  uint64_t docs_total = 0, segs_total = 0, toks_total = 0, unk = 0, bytes = 0;
  auto close_shard = [&]() {
    if (!w) return;
    w->finish();
    docs_total += w->num_documents();
    segs_total += w->num_segments();
    toks_total += w->num_tokens();
    w.reset();
  };
  auto writer = [&]() -> data::MlmShardWriter& {
    if (w && w->num_tokens() >= shard_tokens) close_shard();
    if (!w) {
      written.push_back(shard_name(out, prefix, written.size()));
      w = std::make_unique<data::MlmShardWriter>(written.back(), info);
    }
    return *w;
  };

  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    ADA_CHECK_ARG(in.good(), IoError) << "cannot open input " << f;
    std::string line;
    bool in_doc = false;
    while (std::getline(in, line)) {
      bytes += line.size() + 1;
      if (blank(line)) {
        if (docs == "blank-line" && in_doc) {
          w->end_document();
          in_doc = false;
        }
        continue;
      }
      std::vector<int32_t> ids = tok.encode(line);
      if (ids.empty()) continue;
      for (int32_t id : ids) unk += id == sp.unk;
      data::MlmShardWriter& sw = in_doc ? *w : writer();  // a new shard only between documents
      sw.add_segment(ids);
      in_doc = true;
    }
    ADA_CHECK_ARG(!in.bad(), IoError) << "read error in input " << f;
    if (in_doc) w->end_document();
  }
  close_shard();
  if (written.empty()) {  // no text at all: still write one (empty) shard so the run is visible
    written.push_back(shard_name(out, prefix, 0));
    data::MlmShardWriter(written.back(), info).finish();
  }
  // Remove higher-numbered shards of an earlier run with the same prefix.
  for (size_t k = written.size();; ++k) {
    const std::string stale = shard_name(out, prefix, k);
    if (!fs::exists(stale)) break;
    fs::remove(stale, ec);
    std::cout << "removed stale shard " << stale << "\n";
  }
  if (verify)
    for (const std::string& s : written) data::MlmShard::open(s)->verify();

  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  char summary[256];
  std::snprintf(
      summary, sizeof(summary),
      "%zu files, %.1f MB -> %zu shard(s) in %s: %llu documents, %llu segments, %llu "
      "tokens (%.4f%% [UNK]) in %.1f s%s",
      files.size(), static_cast<double>(bytes) / 1e6, written.size(), out.c_str(),
      static_cast<unsigned long long>(docs_total), static_cast<unsigned long long>(segs_total),
      static_cast<unsigned long long>(toks_total),
      toks_total ? 100.0 * static_cast<double>(unk) / static_cast<double>(toks_total) : 0.0, secs,
      verify ? ", verified" : "");
  std::cout << "prepare_mlm: " << summary << "\n";
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
